/** Reading b-trees and payloads of one SQLite file through the page cache: lookups by key
 * and rowid, scans, and byte ranges of values that overflow onto chains of pages. */

import { FormatError } from "./errors.js";
import {
  type Header, type Payload, PAGE_INDEX_INTERIOR, PAGE_INDEX_LEAF, PAGE_TABLE_INTERIOR, PAGE_TABLE_LEAF,
  isSpecialPage, parseBtreePage, ptrmapPageOf, readCell, serialSize, u32, varint,
} from "./format.js";
import type { PageCache } from "./pages.js";

// Deeper than any b-tree a file of 2^32 pages can have: a deeper descent is a loop.
const MAX_DEPTH = 40;
const MAX_CHAINS = 4096;

/** The next page a writer appending to the file would have taken after `page`. */
function nextAllocated(page: number, header: Header): number {
  let next = page + 1;
  while (isSpecialPage(next, header)) next++;
  return next;
}

interface Chain {
  pages: number[];
  seen: Set<number>;
  // One reader extends a chain at a time; concurrent readers wait for it and reuse its pages.
  extending: Promise<void> | null;
}

/** A record field: its serial type and its bytes. */
export interface Field {
  type: number;
  bytes: Uint8Array;
}

/** The class order SQLite sorts values by: NULL < numbers < text < blob. */
function typeClass(type: number): number {
  if (type === 0) return 0;
  if (type < 12) return 1;
  return type & 1 ? 2 : 3;
}

export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

export function recordFields(payload: Uint8Array): Field[] {
  const [headerSize, first] = varint(payload, 0, payload.length);
  if (headerSize > payload.length || headerSize < first) throw new FormatError("a record's header is larger than the record");
  const fields: Field[] = [];
  let at = headerSize;
  for (let h = first; h < headerSize;) {
    const [type, next] = varint(payload, h, headerSize);
    const size = serialSize(type);
    if (size < 0 || at + size > payload.length) throw new FormatError("a record's values run past its end");
    fields.push({ type, bytes: payload.subarray(at, at + size) });
    at += size;
    h = next;
  }
  return fields;
}

function fieldInt(field: Field): number {
  if (field.type === 8 || field.type === 9) return field.type - 8;
  if (field.type < 1 || field.type > 6) throw new FormatError("an index entry's rowid is not an integer");
  let value = field.bytes[0] & 0x80 ? -1 : 0;
  for (const byte of field.bytes) value = value * 256 + byte;
  return value;
}

export class BtreeReader {
  private readonly chains = new Map<number, Chain>();

  constructor(readonly header: Header, readonly cache: PageCache) {}

  private async btreePage(pageNo: number) {
    const page = await this.cache.page(pageNo);
    return { page, tree: parseBtreePage(page, pageNo, this.header.usable) };
  }

  /** Overflow pages a payload has beyond its local bytes. */
  overflowCount(payload: Payload): number {
    return Math.ceil((payload.size - payload.local.length) / (this.header.usable - 4));
  }

  /** The first `upTo + 1` pages of a payload's overflow chain, each checked. */
  async chainPages(payload: Payload, upTo: number): Promise<number[]> {
    const total = this.overflowCount(payload);
    if (upTo >= total) throw new RangeError("past the end of the chain");
    // Every overflow page holds usable-4 bytes: a chain longer than the file cannot exist.
    if (total > this.cache.pageCount) {
      throw new FormatError(`a value of ${payload.size} bytes claims more overflow pages than the file has`);
    }
    let chain = this.chains.get(payload.overflow);
    if (!chain) {
      this.cache.checkPage(payload.overflow);
      chain = { pages: [payload.overflow], seen: new Set([payload.overflow]), extending: null };
      if (this.chains.size >= MAX_CHAINS) this.chains.delete(this.chains.keys().next().value as number);
      this.chains.set(payload.overflow, chain);
    }
    while (chain.pages.length <= upTo) {
      if (chain.extending) {
        await chain.extending;
        continue;
      }
      const current = chain;
      chain.extending = (async () => {
        if (this.header.autoVacuum && await this.extendByPointerMap(current, upTo)) return;
        await this.extendByWalking(current, upTo);
      })();
      try {
        await chain.extending;
      } finally {
        chain.extending = null;
      }
    }
    return chain.pages;
  }

  private append(chain: Chain, page: number): void {
    this.cache.checkPage(page);
    if (chain.seen.has(page)) throw new FormatError(`an overflow chain visits page ${page} twice: the file is damaged`);
    if (isSpecialPage(page, this.header)) throw new FormatError(`an overflow chain runs through page ${page}, which is not a data page`);
    chain.seen.add(page);
    chain.pages.push(page);
  }

  /** A file with auto-vacuum has pointer maps, which name each overflow page's predecessor:
   * when the chain continues on the pages that follow (as a value written at once does), a
   * few map entries prove it, so a range far into a value needs no walk through its pages. */
  private async extendByPointerMap(chain: Chain, upTo: number): Promise<boolean> {
    const guesses: number[] = [];
    let page = chain.pages[chain.pages.length - 1];
    for (let i = chain.pages.length; i <= upTo; i++) {
      page = nextAllocated(page, this.header);
      if (page > this.cache.pageCount) break;
      guesses.push(page);
    }
    const maps = [...new Set(guesses.map((g) => ptrmapPageOf(g, this.header.usable)))];
    await this.cache.load(maps);
    let grown = false;
    for (const guess of guesses) {
      const map = await this.cache.page(ptrmapPageOf(guess, this.header.usable));
      const at = 5 * (guess - ptrmapPageOf(guess, this.header.usable) - 1);
      if (at + 5 > this.header.usable) return grown;
      const previous = chain.pages[chain.pages.length - 1];
      if (map[at] !== 4 || u32(map, at + 1) !== previous) return grown;
      this.append(chain, guess);
      grown = true;
    }
    return grown;
  }

  /** Follows the chain's pointers, fetching the pages it would take if contiguous in one go. */
  private async extendByWalking(chain: Chain, upTo: number): Promise<void> {
    const guesses = [chain.pages[chain.pages.length - 1]];
    const limit = Math.max(1, Math.floor(this.cache.capacity / 2));
    for (let i = chain.pages.length; i <= upTo && guesses.length < limit; i++) {
      const next = nextAllocated(guesses[guesses.length - 1], this.header);
      if (next > this.cache.pageCount) break;
      guesses.push(next);
    }
    await this.cache.load(guesses);
    do {
      const last = chain.pages[chain.pages.length - 1];
      const next = u32(await this.cache.page(last), 0);
      if (next === 0) throw new FormatError("an overflow chain ends before its value does");
      this.append(chain, next);
    } while (chain.pages.length <= upTo && this.cache.has(chain.pages[chain.pages.length - 1]));
  }

  /** `length` bytes of a payload from `start`: the page's own bytes, then only the overflow
   * pages the range touches (in windows, so a huge value never fills more than the cache). */
  async payloadRange(payload: Payload, start: number, length: number): Promise<Uint8Array> {
    if (start < 0 || length < 0 || start + length > payload.size) throw new RangeError("outside the payload");
    const out = new Uint8Array(length);
    const local = payload.local.length;
    let filled = 0;
    if (start < local) {
      const part = payload.local.subarray(start, Math.min(local, start + length));
      out.set(part);
      filled = part.length;
    }
    if (filled === length) return out;
    const per = this.header.usable - 4;
    const from = start + filled - local;
    const end = start + length - local;
    const first = Math.floor(from / per);
    const last = Math.floor((end - 1) / per);
    const windowPages = Math.max(1, Math.floor(this.cache.capacity / 2));
    for (let w = first; w <= last; w += windowPages) {
      const wLast = Math.min(last, w + windowPages - 1);
      const chain = await this.chainPages(payload, wLast);
      const pages = chain.slice(w, wLast + 1);
      await this.cache.load(pages);
      for (let i = w; i <= wLast; i++) {
        const page = await this.cache.page(chain[i]);
        const lo = Math.max(from, i * per) - i * per;
        const hi = Math.min(end, (i + 1) * per) - i * per;
        out.set(page.subarray(4 + lo, 4 + hi), filled);
        filled += hi - lo;
      }
    }
    return out;
  }

  async wholePayload(payload: Payload): Promise<Uint8Array> {
    return payload.size === payload.local.length ? payload.local : this.payloadRange(payload, 0, payload.size);
  }

  /** Every row's payload of the table (or WITHOUT ROWID table / index) at `root`, in order. */
  async *scan(root: number, depth = 0): AsyncGenerator<Payload> {
    if (depth > MAX_DEPTH) throw new FormatError("a b-tree deeper than any real one: the file loops");
    const { page, tree } = await this.btreePage(root);
    const cells = tree.cells.map((at) => readCell(page, root, tree.type, at, this.header.usable));
    if (tree.type === PAGE_TABLE_LEAF || tree.type === PAGE_INDEX_LEAF) {
      yield* cells;
      return;
    }
    const children = [...cells.map((c) => c.leftChild), tree.rightChild];
    children.forEach((child) => this.cache.checkPage(child));
    await this.cache.load(children.filter((child) => !this.cache.has(child)).slice(0, 64));
    for (const cell of cells) {
      yield* this.scan(cell.leftChild, depth + 1);
      if (tree.type === PAGE_INDEX_INTERIOR) yield cell;
    }
    yield* this.scan(tree.rightChild, depth + 1);
  }

  /** The rowid of the entry of the index at `root` whose first column is the text `key`. */
  async indexLookup(root: number, key: Uint8Array): Promise<number | null> {
    let pageNo = root;
    for (let depth = 0; depth <= MAX_DEPTH; depth++) {
      const { page, tree } = await this.btreePage(pageNo);
      if (tree.type !== PAGE_INDEX_INTERIOR && tree.type !== PAGE_INDEX_LEAF) {
        throw new FormatError(`page ${pageNo} of an index is not an index page`);
      }
      let lo = 0;
      let hi = tree.cells.length;
      let found: Field[] | null = null;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        const cell = readCell(page, pageNo, tree.type, tree.cells[mid], this.header.usable);
        const fields = recordFields(await this.wholePayload(cell));
        if (fields.length < 2) throw new FormatError("an index entry has no rowid");
        const cmp = typeClass(fields[0].type) - 2 || compareBytes(fields[0].bytes, key);
        if (cmp === 0) found = fields;
        if (cmp < 0) lo = mid + 1;
        else hi = mid;
        if (found) break;
      }
      if (found) return fieldInt(found[found.length - 1]);
      if (tree.type === PAGE_INDEX_LEAF) return null;
      pageNo = lo < tree.cells.length
        ? readCell(page, pageNo, tree.type, tree.cells[lo], this.header.usable).leftChild
        : tree.rightChild;
    }
    throw new FormatError("an index deeper than any real one: the file loops");
  }

  /** The first column of the first entry of the index at `root` that is not less than the
   * text `key` (UTF-8 bytes), or null if every entry is less. */
  async indexLowerBound(root: number, key: Uint8Array): Promise<Uint8Array | null> {
    let pageNo = root;
    // The smallest entry seen on the way down that is not less than `key`: interior cells of
    // an index are entries too, and lie after everything in their left child.
    let candidate: Uint8Array | null = null;
    for (let depth = 0; depth <= MAX_DEPTH; depth++) {
      const { page, tree } = await this.btreePage(pageNo);
      if (tree.type !== PAGE_INDEX_INTERIOR && tree.type !== PAGE_INDEX_LEAF) {
        throw new FormatError(`page ${pageNo} of an index is not an index page`);
      }
      let lo = 0;
      let hi = tree.cells.length;
      let atLo: Field | null = null;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        const cell = readCell(page, pageNo, tree.type, tree.cells[mid], this.header.usable);
        const first = recordFields(await this.wholePayload(cell))[0];
        if (!first) throw new FormatError("an index entry without columns");
        const cmp = typeClass(first.type) - 2 || compareBytes(first.bytes, key);
        if (cmp < 0) lo = mid + 1;
        else {
          hi = mid;
          atLo = first;
        }
      }
      if (atLo && lo < tree.cells.length) {
        if (!(atLo.type >= 13 && atLo.type & 1)) return candidate; // past the text keys
        candidate = atLo.bytes.slice();
      }
      if (tree.type === PAGE_INDEX_LEAF) return candidate;
      pageNo = lo < tree.cells.length
        ? readCell(page, pageNo, tree.type, tree.cells[lo], this.header.usable).leftChild
        : tree.rightChild;
    }
    throw new FormatError("an index deeper than any real one: the file loops");
  }

  /** The row `rowid` of the table at `root`. */
  async tableLookup(root: number, rowid: number): Promise<Payload | null> {
    let pageNo = root;
    for (let depth = 0; depth <= MAX_DEPTH; depth++) {
      const { page, tree } = await this.btreePage(pageNo);
      if (tree.type !== PAGE_TABLE_INTERIOR && tree.type !== PAGE_TABLE_LEAF) {
        throw new FormatError(`page ${pageNo} of a table is not a table page`);
      }
      let lo = 0;
      let hi = tree.cells.length;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        const cell = readCell(page, pageNo, tree.type, tree.cells[mid], this.header.usable);
        if (cell.rowid < rowid) lo = mid + 1;
        else hi = mid;
      }
      if (tree.type === PAGE_TABLE_LEAF) {
        if (lo === tree.cells.length) return null;
        const cell = readCell(page, pageNo, tree.type, tree.cells[lo], this.header.usable);
        return cell.rowid === rowid ? cell : null;
      }
      pageNo = lo < tree.cells.length
        ? readCell(page, pageNo, tree.type, tree.cells[lo], this.header.usable).leftChild
        : tree.rightChild;
    }
    throw new FormatError("a table deeper than any real one: the file loops");
  }
}
