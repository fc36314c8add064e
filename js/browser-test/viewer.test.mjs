// The viewer page in a real, headless Chromium (Debian's package; nothing downloaded), against
// a loopback server that honours Range and counts requests: the hierarchy, decoded values of a
// known slice, and its drawn pixels.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

import { serve } from "../tools/server.mjs";
import { fixtures } from "../test/fixtures.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

export async function launch() {
  assert.ok(existsSync(CHROMIUM), `no browser at ${CHROMIUM}: apt-get install chromium`);
  const profile = mkdtempSync(join(tmpdir(), "zarrdb-chromium-"));
  // A fresh profile each time (playwright passes it as --user-data-dir).
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  return { browser: context, close: async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); } };
}

test("the viewer shows the hierarchy and draws a known slice of a sharded array", async () => {
  const { dir, manifest } = fixtures();
  const server = await serve({ "/viewer/": join(here, "..", "dist", "viewer"), "/data/": dir });
  const { browser, close } = await launch();
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (error) => errors.push(String(error)));
    const index = 4;
    await page.goto(`${server.url}/viewer/index.html?url=/data/arrays.zarrdb&array=nested/cube&index=${index}`);
    await page.waitForFunction(() => globalThis.zarrdbViewer?.slice || globalThis.zarrdbViewer?.state === "error", null, { timeout: 60_000 });
    const state = await page.evaluate(() => globalThis.zarrdbViewer);
    assert.equal(state.error, undefined, state.error);
    assert.deepEqual(errors, []);
    assert.deepEqual(state.nodes.sort(), ["", "nested", "nested/cube", "plain"]);
    // Tree entries for every node, arrays marked as such.
    assert.equal(await page.locator('#tree button[data-path="plain"].array').count(), 1);
    // Decoded values: the plane cube[4] as zarr-python reads it.
    const all = new Uint16Array(Buffer.from(manifest["arrays.zarrdb"].arrays["nested/cube"], "base64").buffer.slice(0));
    const plane = Array.from(all.subarray(index * 64 * 96, (index + 1) * 64 * 96));
    assert.deepEqual(state.slice.shape, [64, 96]);
    assert.deepEqual(state.slice.values, plane);
    // Drawn pixels: switch to the grey map, where a pixel's level is its value's place in the range.
    await page.selectOption("#colormap", "gray");
    await page.waitForFunction(() => document.getElementById("range").textContent.includes("gray"));
    const pixels = await page.evaluate(() => {
      const canvas = document.getElementById("canvas");
      return Array.from(canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data);
    });
    const min = Math.min(...plane);
    const max = Math.max(...plane);
    assert.equal(pixels.length, 64 * 96 * 4);
    for (let i = 0; i < plane.length; i += 37) {
      const level = Math.round(((plane[i] - min) / (max - min)) * 255);
      assert.deepEqual(pixels.slice(i * 4, i * 4 + 4), [level, level, level, 255], `pixel ${i}`);
    }
    // Every data request was a range request answered with 206.
    const dataRequests = server.stats.log.filter((entry) => entry.path === "/data/arrays.zarrdb");
    assert.ok(dataRequests.length > 0 && dataRequests.every((entry) => entry.status === 206));
    // Another plane through the slider: the values follow.
    await page.locator('input[data-axis="0"]').fill("1");
    await page.waitForFunction(() => globalThis.zarrdbViewer.slice.index[0] === 1);
    const second = await page.evaluate(() => globalThis.zarrdbViewer.slice.values);
    assert.deepEqual(second, Array.from(all.subarray(64 * 96, 2 * 64 * 96)));
  } finally {
    await close();
    await server.close();
  }
});

test("a local file given to the page (as a dropped one) is read as a Blob", async () => {
  const { dir, manifest } = fixtures();
  const server = await serve({ "/viewer/": join(here, "..", "dist", "viewer") });
  const { browser, close } = await launch();
  try {
    const page = await browser.newPage();
    await page.goto(`${server.url}/viewer/index.html?array=plain`);
    await page.setInputFiles("#file", join(dir, "arrays.zarrdb"));
    await page.waitForFunction(() => globalThis.zarrdbViewer?.slice || globalThis.zarrdbViewer?.state === "error", null, { timeout: 60_000 });
    const state = await page.evaluate(() => globalThis.zarrdbViewer);
    assert.equal(state.error, undefined, state.error);
    const plain = new Float32Array(Buffer.from(manifest["arrays.zarrdb"].arrays.plain, "base64").buffer.slice(0));
    assert.deepEqual(state.slice.shape, [100, 130]);
    assert.deepEqual(state.slice.values, Array.from(plain));
    assert.equal(server.stats.log.filter((entry) => !entry.path.startsWith("/viewer/")).length, 0);
  } finally {
    await close();
    await server.close();
  }
});
