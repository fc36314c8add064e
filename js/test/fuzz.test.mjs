// Damaged files: random bytes changed in real files. Each read ends, quickly, with the right
// bytes or one of the store's errors: never a hang, a crash of another kind, or an allocation
// sized by a claim.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { MemorySource, ZarrDBError, ZarrDBStore } from "../dist/index.js";
import { fixtures } from "./fixtures.mjs";

const { dir } = fixtures();

// A small deterministic generator (mulberry32), so a failure can be replayed by its seed.
function random(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function readEverything(bytes) {
  const store = await ZarrDBStore.open(new MemorySource(bytes), { cacheBytes: 1 << 20 });
  for await (const key of store.keys()) {
    await store.get(`/${key}`);
    await store.getRange(`/${key}`, { suffixLength: 10 });
  }
}

for (const name of ["stdlib_1024.zarrdb", "zarrdb_4096.zarrdb", "shell.zarrdb"]) {
  test(`${name} with random bytes changed`, async () => {
    const original = new Uint8Array(readFileSync(join(dir, name)));
    const pageSize = ((original[16] << 8) | original[17]) || 65536;
    const next = random(name.length * 7919);
    let refused = 0;
    for (let trial = 0; trial < 80; trial++) {
      const bytes = original.slice();
      // Damage where the structure is: b-tree page headers, cell pointers, overflow pointers.
      for (let n = 0; n < 1 + Math.floor(next() * 6); n++) {
        const page = Math.floor(next() * (bytes.length / pageSize));
        const at = page * pageSize + (next() < 0.7 ? Math.floor(next() * 24) : Math.floor(next() * pageSize));
        bytes[at] = Math.floor(next() * 256);
      }
      try {
        await readEverything(bytes);
      } catch (error) {
        assert.ok(error instanceof ZarrDBError,
          `trial ${trial}: ${error?.constructor?.name}: ${error?.message}\n${error?.stack}`);
        refused++;
      }
    }
    assert.ok(refused > 0, "some damaged files were refused");
  });
}
