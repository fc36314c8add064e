// Requests and bytes for the same reads of the same data from one loopback server: the .zarrdb
// through ZarrDBStore, the directory through zarrita's FetchStore, the zip through its zip store.
// npm run bench [-- --markdown]
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as zarr from "zarrita";
import { FetchStore, ZipFileStore } from "@zarrita/storage";

import { ZarrDBStore } from "../dist/index.js";
import { serve } from "../tools/server.mjs";
import { python } from "../test/fixtures.mjs";

const dir = join(tmpdir(), "zarrdb-js-bench-data");
if (!existsSync(join(dir, "data.zip"))) {
  mkdirSync(dir, { recursive: true });
  execFileSync(python(), [new URL("make_data.py", import.meta.url).pathname, dir], { stdio: "inherit" });
}
const server = await serve({ "/": dir });

const layouts = {
  ".zarrdb (ZarrDBStore)": () => ZarrDBStore.open(`${server.url}/data.zarrdb`),
  "directory (FetchStore)": async () => new FetchStore(`${server.url}/data.zarr`),
  "zip (ZipFileStore)": async () => ZipFileStore.fromUrl(`${server.url}/data.zip`),
};

async function openArray(store, path) {
  const root = await zarr.open(zarr.root(store), { kind: "group" });
  return zarr.open(root.resolve(path), { kind: "array" });
}

const scenarios = {
  "open + root + one array's metadata": { measureOpen: true, run: async (store) => openArray(store, "big") },
  "64x64 window inside one chunk": {
    path: "big", run: (_, array) => zarr.get(array, [zarr.slice(300, 364), zarr.slice(600, 664)]),
  },
  "one inner chunk of a 4 MiB shard": {
    path: "sharded", run: (_, array) => zarr.get(array, [zarr.slice(512, 768), zarr.slice(256, 512)]),
  },
  "full read of a 64 MiB array": { path: "big", run: (_, array) => zarr.get(array) },
};

const rows = [];
for (const [scenario, spec] of Object.entries(scenarios)) {
  for (const [layout, make] of Object.entries(layouts)) {
    server.reset();
    const store = await make();
    let array = null;
    if (!spec.measureOpen) {
      array = await openArray(store, spec.path);
      server.reset();
    }
    const started = performance.now();
    await spec.run(store, array);
    rows.push({ scenario, layout, requests: server.stats.requests, bytes: server.stats.bytes, ms: performance.now() - started });
  }
}
await server.close();

const mib = (n) => (n >= 1 << 20 ? `${(n / (1 << 20)).toFixed(2)} MiB` : `${(n / 1024).toFixed(1)} KiB`);
console.log("| read | layout | requests | bytes |");
console.log("| --- | --- | ---: | ---: |");
for (const row of rows) console.log(`| ${row.scenario} | ${row.layout} | ${row.requests} | ${mib(row.bytes)} |`);
