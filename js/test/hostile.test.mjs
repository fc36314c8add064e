// Files and servers from strangers: the refusals zarrdb's Python gives, and no hang.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  FormatError, IncompatibleFlagError, MemorySource, NotAZarrDBError, ObjectChangedError,
  RangeNotSupportedError, SourceError, UnsafeSchemaError, UnsupportedVersionError, ZarrDBStore,
} from "../dist/index.js";
import { serve } from "../tools/server.mjs";
import { fixtures } from "./fixtures.mjs";

const { dir, manifest } = fixtures();

function open(name, options) {
  return ZarrDBStore.open(new MemorySource(new Uint8Array(readFileSync(join(dir, name))), name), options);
}

const REFUSED = {
  "utf16.zarrdb": [FormatError, /UTF-16le/],
  "without_rowid.zarrdb": [FormatError, /WITHOUT ROWID/],
  "flags.zarrdb": [IncompatibleFlagError, /future-thing/],
  "version2.zarrdb": [UnsupportedVersionError, /2\.0/],
  "trigger.zarrdb": [UnsafeSchemaError, /trigger 't'/],
  "partial_index.zarrdb": [UnsafeSchemaError, /WHERE clause/],
};

test("files Python refuses are refused here, for the same reason", async (t) => {
  for (const [name, [kind, message]] of Object.entries(REFUSED)) {
    await t.test(name, async () => {
      assert.ok(manifest._refusals[name], `zarrdb's Python refuses ${name} too`);
      await assert.rejects(open(name), (error) => error instanceof kind && message.test(error.message));
    });
  }
});

test("keys in another collation than BINARY are refused", async () => {
  // zarrdb's Python reads such a file through SQL (and `zarrdb check` reports it); an index in
  // another order cannot be searched by comparing bytes, so this reader refuses it.
  await assert.rejects(open("nocase.zarrdb"), (e) => e instanceof FormatError && /collation NOCASE/.test(e.message));
});

test("not SQLiteStore files: zarr 2's layout, not SQLite at all, a file cut short", async () => {
  await assert.rejects(open("zarr2.zarrdb"), (e) => e instanceof NotAZarrDBError && /zarr-python 2/.test(e.message));
  await assert.rejects(open("not_sqlite.zarrdb"), (e) => e instanceof NotAZarrDBError && /not an SQLite database/.test(e.message));
  // A third of a file: pages past its end are refused wherever they are needed.
  await assert.rejects(async () => {
    const store = await open("truncated.zarrdb");
    for await (const key of store.keys()) await store.get(key);
  }, (e) => e instanceof FormatError && /outside the file/.test(e.message));
});

test("an overflow chain that comes back to a page is refused, not followed forever", async () => {
  const store = await open("loop.zarrdb");
  await assert.rejects(store.get(`/${manifest["loop.zarrdb"].key}`), (e) => e instanceof FormatError && /twice/.test(e.message));
});

test("a page count or value size beyond the file is refused, not allocated", async () => {
  const bytes = new Uint8Array(readFileSync(join(dir, "stdlib_1024.zarrdb")));
  // The header claims 2^31 pages: only the pages the file has are used.
  const view = new DataView(bytes.buffer);
  view.setUint32(28, 0x7fffffff);
  const store = await ZarrDBStore.open(new MemorySource(bytes), {});
  assert.equal(store.cache.pageCount, bytes.length / 1024);
  const expected = Buffer.from(manifest["stdlib_1024.zarrdb"].values["values/1000003"], "base64");
  assert.equal(Buffer.compare(Buffer.from(await store.get("/values/1000003")), expected), 0);
});

test("a server that ignores Range is refused for a large file, fine for a small one", async () => {
  const server = await serve({ "/": dir }, { ignoreRange: true });
  try {
    await assert.rejects(ZarrDBStore.open(`${server.url}/zarrdb_4096.zarrdb`, { head: 65536 }),
      (e) => e instanceof RangeNotSupportedError && /ignores Range/.test(e.message));
    const small = await ZarrDBStore.open(`${server.url}/trigger.zarrdb`, { head: 4 << 20 }).catch((e) => e);
    assert.ok(small instanceof UnsafeSchemaError, "a small file is read whole and checked");
  } finally {
    await server.close();
  }
});

test("an object that changes after open: 412 from If-Match, refused", async () => {
  const server = await serve({ "/": dir });
  try {
    const store = await ZarrDBStore.open(`${server.url}/zarrdb_65536.zarrdb`, { head: 65536 });
    server.behaviour.version = 2;
    await assert.rejects(store.get("/values/1000003"), (e) => e instanceof ObjectChangedError && /412/.test(e.message));
  } finally {
    await server.close();
  }
});

test("an object that changes, seen in the ETag when If-Match is not sent", async () => {
  const server = await serve({ "/": dir });
  try {
    const store = await ZarrDBStore.open(`${server.url}/zarrdb_65536.zarrdb`, { head: 65536, conditional: false });
    server.behaviour.version = 3;
    await assert.rejects(store.get("/values/1000003"), (e) => e instanceof ObjectChangedError);
  } finally {
    await server.close();
  }
});

test("a server that sends more than asked for is cut off, not buffered", async () => {
  const server = await serve({ "/": dir }, { oversend: 50 << 20 });
  try {
    await assert.rejects(ZarrDBStore.open(`${server.url}/zarrdb_65536.zarrdb`, { head: 65536 }),
      (e) => e instanceof SourceError && /more than|at most/.test(e.message));
  } finally {
    await server.close();
  }
});

test("failed requests are retried", async () => {
  const server = await serve({ "/": dir }, { failFirst: 2 });
  try {
    const store = await ZarrDBStore.open(`${server.url}/zarrdb_4096.zarrdb`);
    assert.equal((await store.get("/values/100")).length, 100);
  } finally {
    await server.close();
  }
});

test("a stalled server fails the read within its timeout, no hang", async () => {
  const server = await serve({ "/": dir }, { stall: true });
  try {
    const started = Date.now();
    await assert.rejects(ZarrDBStore.open(`${server.url}/zarrdb_4096.zarrdb`, { stallTimeout: 300, retries: 1 }),
      (e) => e instanceof SourceError && /no bytes for 300 ms|aborted/.test(e.message));
    assert.ok(Date.now() - started < 10_000);
  } finally {
    await server.close();
  }
});
