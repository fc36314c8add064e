/** A read-only zarrita store over a SQLiteStore 1.0 (`.zarrdb`) file. */

import { BtreeReader, compareBytes, recordFields } from "./btree.js";
import { FormatError } from "./errors.js";
import { type Header, type Payload, parseHeader, decodeRecord, serialSize, varint } from "./format.js";
import { type CacheOptions, PageCache } from "./pages.js";
import { type Layout, type SchemaRow, checkMetadata, checkSchema } from "./schema.js";
import { BlobSource, HttpSource, type HttpOptions, MemorySource, type Source } from "./sources.js";

export type RangeQuery = { offset: number; length: number } | { suffixLength: number };
export interface GetOptions { signal?: AbortSignal }

export interface OpenOptions extends CacheOptions, HttpOptions {
  /** Bytes the first request reads: the header, the schema and, usually, the tables' roots. */
  head?: number;
}

const MAX_VALUE_SIZE = 2_147_483_645;
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8");

/** Where a value lies in its row. */
interface ValueSpan {
  row: Payload;
  start: number;
  size: number;
}

export class ZarrDBStore {
  /** Notes about a file read anyway (a foreign application id). */
  readonly warnings: string[];

  private constructor(
    readonly source: Source,
    readonly header: Header,
    readonly cache: PageCache,
    private readonly btree: BtreeReader,
    private readonly layout: Layout,
    readonly metadata: Map<string, string>,
  ) {
    this.warnings = layout.warnings;
  }

  /** Opens a URL (by HTTP range requests), a `File`/`Blob`, bytes in memory or any `Source`. */
  static async open(what: string | URL | Blob | Uint8Array | Source, options: OpenOptions = {}): Promise<ZarrDBStore> {
    const head = options.head ?? 256 << 10;
    let source: Source;
    let first: Uint8Array;
    if (typeof what === "string" || what instanceof URL) {
      ({ source, head: first } = await HttpSource.open(what, head, options));
    } else {
      source = what instanceof Uint8Array ? new MemorySource(what)
        : typeof Blob !== "undefined" && what instanceof Blob ? new BlobSource(what) : what as Source;
      first = await source.read(0, Math.min(head, source.size));
    }
    return ZarrDBStore.fromSource(source, first, options);
  }

  private static async fromSource(source: Source, first: Uint8Array, options: CacheOptions): Promise<ZarrDBStore> {
    const header = parseHeader(first, source.size, source.name);
    if (header.encoding !== 1) {
      const encoding = ["UTF-8", "UTF-16le", "UTF-16be"][header.encoding - 1] ?? `encoding ${header.encoding}`;
      throw new FormatError(`${source.name} stores its text as ${encoding}; SQLiteStore files are read in ` +
        "UTF-8 only (the encoding SQLite gives a new file by default)");
    }
    if (header.pageCount < 1) throw new FormatError(`${source.name} is shorter than one page`);
    const cache = new PageCache(source, header.pageSize, header.pageCount, options);
    cache.seed(0, first);
    const btree = new BtreeReader(header, cache);
    const schema: SchemaRow[] = [];
    for await (const row of btree.scan(1)) {
      const [type, name, table, root, sql] = decodeRecord(await btree.wholePayload(row));
      schema.push({
        type: String(type ?? ""), name: String(name ?? ""), table: String(table ?? ""),
        root: Number(root ?? 0), sql: typeof sql === "string" ? sql : "",
      });
    }
    const layout = checkSchema(schema, header.encoding, header.applicationId, source.name);
    for (const root of [layout.metadataRoot, layout.dataRoot, layout.keyIndexRoot]) cache.checkPage(root);
    // The roots of the two tables and of the key index, in one request if not read yet.
    await cache.load([layout.metadataRoot, layout.keyIndexRoot, layout.dataRoot], true);
    const metadata = new Map<string, string>();
    for await (const row of btree.scan(layout.metadataRoot)) {
      const fields = decodeRecord(await btree.wholePayload(row));
      if (typeof fields[0] === "string" && typeof fields[1] === "string") metadata.set(fields[0], fields[1]);
    }
    checkMetadata(metadata, source.name);
    return new ZarrDBStore(source, header, cache, btree, layout, metadata);
  }

  /** Where the value of `key` lies, or undefined if the file has no such key. */
  private async locate(key: string): Promise<ValueSpan | undefined> {
    const path = key.startsWith("/") ? key.slice(1) : key;
    const wanted = encoder.encode(path);
    const rowid = await this.btree.indexLookup(this.layout.keyIndexRoot, wanted);
    if (rowid === null) return undefined;
    const row = await this.btree.tableLookup(this.layout.dataRoot, rowid);
    if (!row) throw new FormatError(`the key index names row ${rowid}, which table zarr lacks`);
    // Only the record's header and the key are read here (nearly always on the row's page).
    const [headerSize] = varint(await this.btree.payloadRange(row, 0, Math.min(row.size, 9)), 0, Math.min(row.size, 9));
    if (headerSize > row.size) throw new FormatError("a row's record header is larger than the row");
    const header = await this.btree.payloadRange(row, 0, headerSize);
    const types: number[] = [];
    for (let at = varint(header, 0, headerSize)[1]; at < headerSize;) {
      const [type, next] = varint(header, at, headerSize);
      if (serialSize(type) < 0) throw new FormatError(`a row uses the reserved serial type ${type}`);
      types.push(type);
      at = next;
    }
    const { keyColumn, valueColumn } = this.layout;
    if (types.length <= Math.max(keyColumn, valueColumn)) throw new FormatError("a row of table zarr lacks a column");
    const offsets: number[] = [];
    let at = headerSize;
    for (const type of types) {
      offsets.push(at);
      at += serialSize(type);
    }
    if (at > row.size) throw new FormatError("a row's values run past its end");
    const keyType = types[keyColumn];
    const keyBytes = keyType >= 13 && keyType & 1 && serialSize(keyType) === wanted.length
      ? await this.btree.payloadRange(row, offsets[keyColumn], wanted.length) : null;
    if (!keyBytes || compareBytes(keyBytes, wanted) !== 0) {
      throw new FormatError("the key index points at a row with another key: the file is damaged");
    }
    const valueType = types[valueColumn];
    if (valueType < 12) throw new FormatError(`the value of '${path}' is not a blob (NULL or a number)`);
    const size = serialSize(valueType);
    if (size > MAX_VALUE_SIZE) throw new FormatError(`the value of '${path}' claims ${size} bytes, more than SQLite stores`);
    return { row, start: offsets[valueColumn], size };
  }

  async get(key: string, options?: GetOptions): Promise<Uint8Array | undefined> {
    // A read zarrita no longer wants (the viewer moved on) stops between its steps.
    options?.signal?.throwIfAborted();
    const span = await this.locate(key);
    options?.signal?.throwIfAborted();
    if (!span) return undefined;
    return this.btree.payloadRange(span.row, span.start, span.size);
  }

  async getRange(key: string, range: RangeQuery, options?: GetOptions): Promise<Uint8Array | undefined> {
    options?.signal?.throwIfAborted();
    const span = await this.locate(key);
    options?.signal?.throwIfAborted();
    if (!span) return undefined;
    let offset: number;
    let length: number;
    if ("suffixLength" in range) {
      length = Math.min(Math.max(0, range.suffixLength), span.size);
      offset = span.size - length;
    } else {
      offset = Math.min(Math.max(0, range.offset), span.size);
      length = Math.min(Math.max(0, range.length), span.size - offset);
    }
    return this.btree.payloadRange(span.row, span.start + offset, length);
  }

  /** Whether the file has `key`. */
  async has(key: string): Promise<boolean> {
    const path = key.startsWith("/") ? key.slice(1) : key;
    return (await this.btree.indexLookup(this.layout.keyIndexRoot, encoder.encode(path))) !== null;
  }

  /** The keys directly below `prefix` ("" or "a/b/") and the prefixes of the folders there
   * ("a/b/c/"), each in the file's order: one index descent per entry, however many keys
   * lie below a folder (a group's listing does not read its arrays' chunk keys). */
  async listDir(prefix: string): Promise<{ keys: string[]; prefixes: string[] }> {
    const base = prefix && !prefix.endsWith("/") ? `${prefix}/` : prefix;
    const start = encoder.encode(base.startsWith("/") ? base.slice(1) : base);
    const keys: string[] = [];
    const prefixes: string[] = [];
    let seek = start;
    for (;;) {
      const found = await this.btree.indexLowerBound(this.layout.keyIndexRoot, seek);
      if (!found || found.length < start.length || compareBytes(found.subarray(0, start.length), start) !== 0) break;
      const slash = found.indexOf(0x2f, start.length);
      if (slash < 0) {
        keys.push(decoder.decode(found));
        seek = new Uint8Array(found.length + 1); // the smallest key after `found`
        seek.set(found);
      } else {
        prefixes.push(decoder.decode(found.subarray(0, slash + 1)));
        seek = found.slice(0, slash + 1);
        seek[slash] = 0x30; // "0" follows "/": past every key in that folder
      }
    }
    return { keys, prefixes };
  }

  /** Every key, in the file's (UTF-8 byte) order. */
  async *keys(): AsyncGenerator<string> {
    for await (const entry of this.btree.scan(this.layout.keyIndexRoot)) {
      const fields = recordFields(await this.btree.wholePayload(entry));
      if (fields[0] && fields[0].type >= 13 && fields[0].type & 1) yield decoder.decode(fields[0].bytes);
    }
  }
}


