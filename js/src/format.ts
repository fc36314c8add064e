/** The parts of the SQLite file format a SQLiteStore reader needs: the header, b-tree pages,
 * cells, records. https://www.sqlite.org/fileformat2.html */

import { FormatError, NotAZarrDBError } from "./errors.js";

export const MAGIC = "SQLite format 3\0";
export const HEADER_SIZE = 100;
const PENDING_BYTE = 0x40000000;

export interface Header {
  pageSize: number;
  reserved: number;
  usable: number;
  pageCount: number;
  encoding: number;
  applicationId: number;
  autoVacuum: boolean;
  readVersion: number;
}

export function u16(bytes: Uint8Array, at: number): number {
  return (bytes[at] << 8) | bytes[at + 1];
}

export function u32(bytes: Uint8Array, at: number): number {
  return ((bytes[at] << 24) >>> 0) + ((bytes[at + 1] << 16) | (bytes[at + 2] << 8) | bytes[at + 3]);
}

export function parseHeader(bytes: Uint8Array, fileSize: number, name: string): Header {
  if (bytes.length < HEADER_SIZE || String.fromCharCode(...bytes.subarray(0, 16)) !== MAGIC) {
    throw new NotAZarrDBError(`${name} is not an SQLite database (no SQLite header)`);
  }
  const raw = u16(bytes, 16);
  const pageSize = raw === 1 ? 65536 : raw;
  if (pageSize < 512 || pageSize > 65536 || pageSize & (pageSize - 1)) {
    throw new FormatError(`${name}: the header's page size ${raw} is not a power of two from 512 to 65536`);
  }
  const readVersion = bytes[19];
  if (readVersion !== 1 && readVersion !== 2) {
    throw new FormatError(`${name}: file format read version ${readVersion} (SQLite reads 1 and 2 only)`);
  }
  const reserved = bytes[20];
  const usable = pageSize - reserved;
  if (usable < 480) throw new FormatError(`${name}: ${reserved} reserved bytes leave pages of ${usable} usable bytes`);
  if (bytes[21] !== 64 || bytes[22] !== 32 || bytes[23] !== 32) {
    throw new FormatError(`${name}: the header's payload fractions are not SQLite's fixed 64/32/32`);
  }
  // The header's page count is valid only if written by SQLite 3.7.0 or later (the version-valid
  // number matches the change counter); otherwise the file's size says it.
  const filePages = Math.floor(fileSize / pageSize);
  const claimed = u32(bytes, 28);
  const pageCount = claimed > 0 && u32(bytes, 24) === u32(bytes, 92) ? Math.min(claimed, filePages) : filePages;
  const encoding = u32(bytes, 56) || 1;
  return {
    pageSize, reserved, usable, pageCount, encoding, readVersion,
    applicationId: u32(bytes, 68),
    autoVacuum: u32(bytes, 52) !== 0,
  };
}

/** A varint at `at`: its value and the offset after it. Values beyond 2^53 are refused. */
export function varint(bytes: Uint8Array, at: number, end: number): [number, number] {
  let value = 0;
  for (let i = 0; i < 9; i++) {
    if (at + i >= end) throw new FormatError("a varint runs past the end of its page");
    const byte = bytes[at + i];
    if (i === 8) {
      value = value * 256 + byte;
      return [checkSafe(value), at + 9];
    }
    value = value * 128 + (byte & 0x7f);
    if (!(byte & 0x80)) return [checkSafe(value), at + i + 1];
  }
  throw new FormatError("unreachable");
}

function checkSafe(value: number): number {
  if (!Number.isSafeInteger(value)) throw new FormatError("a varint too large for this reader");
  return value;
}

/** Content sizes of a record's serial types. */
export function serialSize(type: number): number {
  if (type >= 12) return (type - (type & 1 ? 13 : 12)) / 2;
  return [0, 1, 2, 3, 4, 6, 8, 8, 0, 0, -1, -1][type];
}

export type Value = null | number | bigint | string | Uint8Array;

const decoder = new TextDecoder("utf-8", { fatal: false });

/** Decodes a whole record (a small payload: schema rows, metadata, index keys). */
export function decodeRecord(payload: Uint8Array): Value[] {
  const [headerSize, first] = varint(payload, 0, payload.length);
  if (headerSize > payload.length || headerSize < first) throw new FormatError("a record's header is larger than the record");
  const types: number[] = [];
  for (let at = first; at < headerSize;) {
    const [type, next] = varint(payload, at, headerSize);
    if (serialSize(type) < 0) throw new FormatError(`a record uses the reserved serial type ${type}`);
    types.push(type);
    at = next;
  }
  const values: Value[] = [];
  let at = headerSize;
  for (const type of types) {
    const size = serialSize(type);
    if (at + size > payload.length) throw new FormatError("a record's values run past its end");
    const bytes = payload.subarray(at, at + size);
    at += size;
    if (type === 0) values.push(null);
    else if (type === 8 || type === 9) values.push(type - 8);
    else if (type <= 6) values.push(readInt(bytes));
    else if (type === 7) values.push(new DataView(bytes.buffer, bytes.byteOffset, 8).getFloat64(0));
    else if (type & 1) values.push(decoder.decode(bytes));
    else values.push(bytes);
  }
  return values;
}

function readInt(bytes: Uint8Array): number | bigint {
  let value = BigInt.asIntN(8, BigInt(bytes[0]));
  for (let i = 1; i < bytes.length; i++) value = (value << 8n) | BigInt(bytes[i]);
  return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
}

export const PAGE_INDEX_INTERIOR = 2;
export const PAGE_TABLE_INTERIOR = 5;
export const PAGE_INDEX_LEAF = 10;
export const PAGE_TABLE_LEAF = 13;

export interface BtreePage {
  type: number;
  cells: number[]; // offsets of the cells in the page
  rightChild: number;
}

export function parseBtreePage(page: Uint8Array, pageNo: number, usable: number): BtreePage {
  const base = pageNo === 1 ? HEADER_SIZE : 0;
  const type = page[base];
  const interior = type === PAGE_INDEX_INTERIOR || type === PAGE_TABLE_INTERIOR;
  if (!interior && type !== PAGE_INDEX_LEAF && type !== PAGE_TABLE_LEAF) {
    throw new FormatError(`page ${pageNo} is not a b-tree page (type ${type})`);
  }
  const headerEnd = base + (interior ? 12 : 8);
  const count = u16(page, base + 3);
  if (headerEnd + 2 * count > usable) throw new FormatError(`page ${pageNo} claims ${count} cells, more than fit`);
  const cells: number[] = [];
  for (let i = 0; i < count; i++) {
    const at = u16(page, headerEnd + 2 * i);
    if (at < headerEnd + 2 * count || at >= usable) throw new FormatError(`page ${pageNo}: cell ${i} lies outside the page`);
    cells.push(at);
  }
  return { type, cells, rightChild: interior ? u32(page, base + 8) : 0 };
}

/** How much of a payload of `size` bytes is on the b-tree page; the rest overflows. */
export function localSize(size: number, usable: number, table: boolean): number {
  const maxLocal = table ? usable - 35 : Math.floor(((usable - 12) * 64) / 255) - 23;
  if (size <= maxLocal) return size;
  const minLocal = Math.floor(((usable - 12) * 32) / 255) - 23;
  const k = minLocal + ((size - minLocal) % (usable - 4));
  return k <= maxLocal ? k : minLocal;
}

/** A cell's payload: its size, the bytes on the page, and the first overflow page (0: none). */
export interface Payload {
  size: number;
  local: Uint8Array;
  overflow: number;
  rowid: number;
  leftChild: number;
  pageNo: number;
}

export function readCell(page: Uint8Array, pageNo: number, kind: number, at: number, usable: number): Payload {
  let leftChild = 0;
  if (kind === PAGE_TABLE_INTERIOR || kind === PAGE_INDEX_INTERIOR) {
    if (at + 4 > usable) throw new FormatError(`page ${pageNo}: a cell runs past the page`);
    leftChild = u32(page, at);
    at += 4;
  }
  if (kind === PAGE_TABLE_INTERIOR) {
    const [rowid] = varint(page, at, usable);
    return { size: 0, local: page.subarray(0, 0), overflow: 0, rowid, leftChild, pageNo };
  }
  const [size, afterSize] = varint(page, at, usable);
  at = afterSize;
  let rowid = 0;
  if (kind === PAGE_TABLE_LEAF) [rowid, at] = varint(page, at, usable);
  const local = localSize(size, usable, kind === PAGE_TABLE_LEAF);
  const overflowAt = at + local;
  if (overflowAt + (local < size ? 4 : 0) > usable) throw new FormatError(`page ${pageNo}: a cell's payload runs past the page`);
  return {
    size,
    local: page.subarray(at, overflowAt),
    overflow: local < size ? u32(page, overflowAt) : 0,
    rowid, leftChild, pageNo,
  };
}

/** The page numbers of pointer-map pages and the lock-byte page: never part of a chain. */
export function isSpecialPage(page: number, header: Header): boolean {
  if (page === Math.floor(PENDING_BYTE / header.pageSize) + 1) return true;
  if (!header.autoVacuum) return false;
  return page === ptrmapPageOf(page, header.usable);
}

export function ptrmapPageOf(page: number, usable: number): number {
  const span = Math.floor(usable / 5) + 1;
  return Math.floor((page - 2) / span) * span + 2;
}
