// The store reads every file exactly as zarrdb's Python does: keys, values, byte ranges, arrays.
import assert from "node:assert/strict";
import { readFileSync, openAsBlob } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import * as zarr from "zarrita";

import { MemorySource, ZarrDBStore } from "../dist/index.js";
import { serve } from "../tools/server.mjs";
import { fixtures } from "./fixtures.mjs";

const { dir, manifest } = fixtures();
const files = Object.keys(manifest).filter((name) => manifest[name].values);

function ranges(size) {
  const out = [{ offset: 0, length: size }, { suffixLength: Math.min(size, 17) }, { suffixLength: size + 10 }];
  for (const [offset, length] of [[0, 1], [1, 3], [size >> 1, 5000], [size - 1, 1], [1019, 2048], [size + 5, 3]]) {
    out.push({ offset, length });
  }
  return out;
}

function slice(bytes, range) {
  if ("suffixLength" in range) return bytes.subarray(Math.max(0, bytes.length - range.suffixLength));
  const start = Math.min(range.offset, bytes.length);
  return bytes.subarray(start, Math.min(bytes.length, start + range.length));
}

async function checkFile(store, name) {
  const expected = manifest[name].values;
  const keys = [];
  for await (const key of store.keys()) keys.push(key);
  // Python sorts by code point, which is the file's UTF-8 byte order.
  assert.deepEqual(keys, Object.keys(expected).sort(byCodePoint));
  for (const [key, b64] of Object.entries(expected)) {
    const want = Buffer.from(b64, "base64");
    const got = await store.get(`/${key}`);
    assert.ok(got, `${name}: ${key} missing`);
    assert.equal(Buffer.compare(Buffer.from(got), want), 0, `${name}: value of ${key}`);
    for (const range of ranges(want.length)) {
      const part = await store.getRange(`/${key}`, range);
      assert.equal(Buffer.compare(Buffer.from(part), Buffer.from(slice(want, range))), 0,
        `${name}: ${key} ${JSON.stringify(range)}`);
    }
  }
  assert.equal(await store.get("/no/such/key"), undefined);
  await assert.rejects(store.get("/zarr.json", { signal: AbortSignal.abort() }), { name: "AbortError" });
  assert.equal(await store.getRange("/no/such/key", { offset: 0, length: 1 }), undefined);
}

function byCodePoint(a, b) {
  const x = [...a].map((c) => c.codePointAt(0));
  const y = [...b].map((c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
}

test("files of every writer, in memory: every key, value and range as Python reads them", async (t) => {
  assert.ok(files.length >= 6, "the fixtures include zarrdb, WAL, stdlib and shell files");
  for (const name of files) {
    await t.test(name, async () => {
      const bytes = new Uint8Array(readFileSync(join(dir, name)));
      await checkFile(await ZarrDBStore.open(new MemorySource(bytes, name), { cacheBytes: 1 << 20 }), name);
    });
  }
});

test("arrays of every writer read through zarrita equal zarr-python's", async () => {
  const names = Object.keys(manifest).filter((name) => manifest[name].arrays);
  assert.ok(names.includes("zarr_sqlite.zarrdb"), "zarr-sqlite wrote a fixture (it is a test dependency on 3.12)");
  for (const name of names) {
    const store = await ZarrDBStore.open(new MemorySource(new Uint8Array(readFileSync(join(dir, name))), name));
    for (const [path, b64] of Object.entries(manifest[name].arrays)) {
      const array = await zarr.open(path ? zarr.root(store).resolve(path) : zarr.root(store), { kind: "array" });
      const chunk = await zarr.get(array);
      const got = Buffer.from(chunk.data.buffer, chunk.data.byteOffset, chunk.data.byteLength);
      assert.equal(Buffer.compare(got, Buffer.from(b64, "base64")), 0, `${name}: ${path}`);
    }
  }
});

test("a File/Blob is read by slices", async () => {
  const name = "zarrdb_4096.zarrdb";
  await checkFile(await ZarrDBStore.open(await openAsBlob(join(dir, name))), name);
});

test("over HTTP range requests, with a cache smaller than the largest value", async () => {
  const server = await serve({ "/": dir });
  try {
    for (const name of ["zarrdb_65536.zarrdb", "stdlib_1024.zarrdb", "wal.zarrdb"]) {
      await checkFile(await ZarrDBStore.open(`${server.url}/${name}`, { cacheBytes: 256 << 10 }), name);
    }
    assert.ok(server.stats.log.every((entry) => entry.status === 206));
  } finally {
    await server.close();
  }
});

test("zarrita reads a plain and a sharded array as zarr-python does", async () => {
  const server = await serve({ "/": dir });
  try {
    const store = await ZarrDBStore.open(`${server.url}/arrays.zarrdb`);
    const root = await zarr.open(zarr.root(store), { kind: "group" });
    assert.equal(root.attrs.title, "fixtures");
    for (const [path, b64] of Object.entries(manifest["arrays.zarrdb"].arrays)) {
      const array = await zarr.open(root.resolve(path), { kind: "array" });
      const chunk = await zarr.get(array);
      const want = Buffer.from(b64, "base64");
      const got = Buffer.from(chunk.data.buffer, chunk.data.byteOffset, chunk.data.byteLength);
      assert.equal(Buffer.compare(got, want), 0, path);
    }
    // One inner chunk of the sharded array: a window of it, read by ranges of its shard.
    const cube = await zarr.open(root.resolve("nested/cube"), { kind: "array" });
    const window = await zarr.get(cube, [3, zarr.slice(16, 32), zarr.slice(48, 64)]);
    const all = new Uint16Array(Buffer.from(manifest["arrays.zarrdb"].arrays["nested/cube"], "base64").buffer.slice(0));
    for (let y = 0; y < 16; y++) for (let x = 0; x < 16; x++) {
      assert.equal(window.data[y * 16 + x], all[3 * 64 * 96 + (16 + y) * 96 + 48 + x]);
    }
  } finally {
    await server.close();
  }
});

test("concurrent reads share the cache: one fetch per page", async () => {
  const server = await serve({ "/": dir });
  try {
    const name = "zarrdb_4096.zarrdb";
    const store = await ZarrDBStore.open(`${server.url}/${name}`);
    server.reset();
    const key = Object.keys(manifest[name].values).find((k) => k === "values/1000003");
    const results = await Promise.all(Array.from({ length: 8 }, () => store.get(`/${key}`)));
    const fetched = server.stats.log.reduce((sum, entry) => sum + entry.end - entry.start + 1, 0);
    assert.ok(fetched < 2 * 1_000_003, `8 concurrent reads of one 1 MB value fetched ${fetched} bytes`);
    for (const r of results) assert.equal(r.length, 1_000_003);
  } finally {
    await server.close();
  }
});

test("a range far into a value: pointer maps spare the pages before it; a walked chain is cached", async () => {
  const server = await serve({ "/": dir });
  const fetched = () => server.stats.log.reduce((sum, entry) => sum + entry.end - entry.start + 1, 0);
  try {
    // A zarrdb file (auto-vacuum, so pointer maps): the last 100 bytes of a 1 MB value.
    const zarrdbFile = await ZarrDBStore.open(`${server.url}/zarrdb_4096.zarrdb`, { head: 4096 });
    await zarrdbFile.has("/values/1000003"); // the key's pages, outside what is measured
    server.reset();
    const want = Buffer.from(manifest["zarrdb_4096.zarrdb"].values["values/1000003"], "base64");
    const tail = await zarrdbFile.getRange("/values/1000003", { suffixLength: 100 });
    assert.equal(Buffer.compare(Buffer.from(tail), want.subarray(-100)), 0);
    assert.ok(fetched() <= 256 << 10, `${fetched()} bytes for the last 100 bytes of a 1 MB value`);
    assert.ok(server.stats.requests <= 3, `${server.stats.requests} requests`);

    // Python's sqlite3 module (no pointer maps): the chain is walked once, then known.
    const plain = await ZarrDBStore.open(`${server.url}/stdlib_1024.zarrdb`, { head: 1024 });
    await plain.has("/values/1000003");
    server.reset();
    await plain.getRange("/values/1000003", { suffixLength: 100 });
    assert.ok(fetched() >= 900_000, "without pointer maps the pages before the range are read");
    server.reset();
    const middle = await plain.getRange("/values/1000003", { offset: 500_000, length: 100 });
    const wantPlain = Buffer.from(manifest["stdlib_1024.zarrdb"].values["values/1000003"], "base64");
    assert.equal(Buffer.compare(Buffer.from(middle), wantPlain.subarray(500_000, 500_100)), 0);
    assert.ok(fetched() <= 128 << 10, `${fetched()} bytes for 100 bytes of a value whose chain is known`);
  } finally {
    await server.close();
  }
});

test("a whole array read at once goes in a few large requests", async () => {
  const server = await serve({ "/": dir });
  try {
    const small = { head: 4096, readAhead: 4096, maxReadAhead: 4096, concurrency: 2 };
    const store = await ZarrDBStore.open(`${server.url}/many_chunks.zarrdb`, small);
    const array = await zarr.open(zarr.root(store), { kind: "array" });
    server.reset();
    const all = await zarr.get(array);
    const want = Buffer.from(manifest["many_chunks.zarrdb"].arrays[""], "base64");
    assert.equal(Buffer.compare(Buffer.from(all.data.buffer, all.data.byteOffset, all.data.byteLength), want), 0);
    // 256 chunks of 4 KiB, read by zarrita all at once: requests waiting together are merged,
    // and no more than `concurrency` are in flight at any moment.
    assert.ok(server.stats.requests <= 32, `${server.stats.requests} requests for 256 chunks`);
    assert.ok(server.stats.maxInFlight <= 2, `${server.stats.maxInFlight} requests at once`);
  } finally {
    await server.close();
  }
});

test("listDir gives a folder's keys and subfolders, as the full key list implies", async () => {
  for (const name of ["zarrdb_512.zarrdb", "arrays.zarrdb", "wal.zarrdb"]) {
    const store = await ZarrDBStore.open(new MemorySource(new Uint8Array(readFileSync(join(dir, name))), name));
    const all = Object.keys(manifest[name].values).sort(byCodePoint);
    const prefixes = new Set([""]);
    for (const key of all) {
      const parts = key.split("/");
      for (let i = 1; i < parts.length; i++) prefixes.add(`${parts.slice(0, i).join("/")}/`);
    }
    for (const prefix of prefixes) {
      const below = all.filter((k) => k.startsWith(prefix)).map((k) => k.slice(prefix.length));
      const keys = below.filter((rest) => !rest.includes("/")).map((rest) => prefix + rest);
      const folders = [...new Set(below.filter((rest) => rest.includes("/")).map((rest) => prefix + rest.slice(0, rest.indexOf("/") + 1)))];
      const listed = await store.listDir(prefix);
      assert.deepEqual(listed.keys, keys, `${name}: keys of '${prefix}'`);
      assert.deepEqual(listed.prefixes, folders.sort(byCodePoint), `${name}: folders of '${prefix}'`);
    }
  }
});
