/** The file's pages, read through a bounded cache shared by every concurrent read. */

import { FormatError } from "./errors.js";
import type { Source } from "./sources.js";

export interface CacheOptions {
  /** Bytes of pages kept (least recently used go first). */
  cacheBytes?: number;
  /** Requests in flight at once. */
  concurrency?: number;
  /** The least a miss fetches, extended forward over pages not yet cached (bytes). */
  readAhead?: number;
  /** The most one read-ahead grows to while reads stay sequential (bytes). */
  maxReadAhead?: number;
  /** The largest single request; longer runs are split and fetched in parallel (bytes). */
  maxRequest?: number;
  /** Runs waiting for a request at most this far apart are fetched together (bytes). */
  mergeGap?: number;
}

interface WaitingRun {
  first: number;
  count: number;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/** Pages of `pageSize` bytes numbered from 1, as SQLite numbers them. */
export class PageCache {
  readonly pageCount: number;
  private readonly pages = new Map<number, Uint8Array>();
  private readonly pending = new Map<number, Promise<void>>();
  private readonly maxPages: number;
  private readonly concurrency: number;
  private readonly readAheadPages: number;
  private readonly maxReadAheadPages: number;
  private readonly maxRequestPages: number;
  private active = 0;
  private readonly waiting: WaitingRun[] = [];
  private readonly mergeGapPages: number;
  private lastEnd = -1;
  private window: number;

  constructor(readonly source: Source, readonly pageSize: number, declaredPages: number, options: CacheOptions = {}) {
    // Only pages the file really has exist, whatever its header claims.
    this.pageCount = Math.min(declaredPages, Math.floor(source.size / pageSize));
    this.maxPages = Math.max(16, Math.floor((options.cacheBytes ?? 64 << 20) / pageSize));
    this.concurrency = Math.max(1, options.concurrency ?? 6);
    this.readAheadPages = Math.max(1, Math.ceil((options.readAhead ?? 64 << 10) / pageSize));
    this.maxReadAheadPages = Math.max(this.readAheadPages, Math.ceil((options.maxReadAhead ?? 4 << 20) / pageSize));
    this.maxRequestPages = Math.max(1, Math.floor((options.maxRequest ?? 8 << 20) / pageSize));
    this.mergeGapPages = Math.floor((options.mergeGap ?? 256 << 10) / pageSize);
    this.window = this.readAheadPages;
  }

  /** The most pages that can be held at once: reads of more go by windows of half this. */
  get capacity(): number {
    return this.maxPages;
  }

  /** Puts pages already read (the bytes of the first request) into the cache. */
  seed(offset: number, bytes: Uint8Array): void {
    if (offset % this.pageSize) return;
    const first = offset / this.pageSize + 1;
    for (let i = 0; (i + 1) * this.pageSize <= bytes.length && first + i <= this.pageCount; i++) {
      this.store(first + i, bytes.slice(i * this.pageSize, (i + 1) * this.pageSize));
    }
  }

  checkPage(page: number): void {
    if (!Number.isInteger(page) || page < 1 || page > this.pageCount) {
      throw new FormatError(`page ${page} is outside the file (${this.pageCount} pages): the file is damaged`);
    }
  }

  has(page: number): boolean {
    return this.pages.has(page);
  }

  /** One page, fetched (with read-ahead) if not cached. */
  async page(page: number): Promise<Uint8Array> {
    this.checkPage(page);
    for (let attempt = 0; attempt < 3; attempt++) {
      const cached = this.pages.get(page);
      if (cached) {
        this.pages.delete(page);
        this.pages.set(page, cached);
        return cached;
      }
      await this.load([page], true);
    }
    throw new FormatError(`page ${page} was evicted as soon as it was read: the cache is too small`);
  }

  /** Makes sure `pages` are cached, fetching the missing ones in as few requests as runs allow. */
  async load(pages: number[], readAhead = false): Promise<void> {
    const waits: Promise<void>[] = [];
    const missing: number[] = [];
    for (const page of pages) {
      this.checkPage(page);
      if (this.pages.has(page)) continue;
      const inflight = this.pending.get(page);
      if (inflight) waits.push(inflight);
      else missing.push(page);
    }
    missing.sort((a, b) => a - b);
    let i = 0;
    while (i < missing.length) {
      let j = i + 1;
      while (j < missing.length && missing[j] === missing[j - 1] + 1 && j - i < this.maxRequestPages) j++;
      let first = missing[i];
      let count = j - i;
      if (readAhead && count < this.window) {
        // Sequential reads widen the window; a jump elsewhere narrows it again.
        this.window = first === this.lastEnd + 1
          ? Math.min(this.window * 2, this.maxReadAheadPages)
          : this.readAheadPages;
        while (count < this.window && first + count <= this.pageCount
          && !this.pages.has(first + count) && !this.pending.has(first + count)) count++;
      }
      this.lastEnd = first + count - 1;
      waits.push(this.fetchRun(first, count));
      i = j;
    }
    await Promise.all(waits);
  }

  private fetchRun(first: number, count: number): Promise<void> {
    const run = new Promise<void>((resolve, reject) => {
      this.waiting.push({ first, count, resolve, reject });
    });
    for (let i = 0; i < count; i++) this.pending.set(first + i, run);
    this.dispatch();
    return run;
  }

  /** Starts waiting runs while fewer than `concurrency` requests are in flight. When runs
   * wait (every slot busy: many reads at once, such as a whole array), neighbours at most
   * `mergeGap` apart go in one request: a full read becomes a few large requests. */
  private dispatch(): void {
    while (this.active < this.concurrency && this.waiting.length) {
      const seed = this.waiting.shift()!;
      const group = [seed];
      let lo = seed.first;
      let hi = seed.first + seed.count;
      for (let grown = true; grown;) {
        grown = false;
        for (let i = 0; i < this.waiting.length; i++) {
          const other = this.waiting[i];
          const end = other.first + other.count;
          const near = other.first <= hi + this.mergeGapPages && end >= lo - this.mergeGapPages;
          if (near && Math.max(hi, end) - Math.min(lo, other.first) <= this.maxRequestPages) {
            group.push(other);
            this.waiting.splice(i--, 1);
            lo = Math.min(lo, other.first);
            hi = Math.max(hi, end);
            grown = true;
          }
        }
      }
      this.active++;
      this.request(lo, hi - lo, group);
    }
  }

  private async request(first: number, count: number, group: WaitingRun[]): Promise<void> {
    try {
      const bytes = await this.source.read((first - 1) * this.pageSize, count * this.pageSize);
      for (let i = 0; i < count; i++) {
        this.store(first + i, bytes.subarray(i * this.pageSize, (i + 1) * this.pageSize));
      }
      for (const run of group) this.settle(run).resolve();
    } catch (error) {
      for (const run of group) this.settle(run).reject(error);
    } finally {
      this.active--;
      this.dispatch();
    }
  }

  private settle(run: WaitingRun): WaitingRun {
    for (let i = 0; i < run.count; i++) this.pending.delete(run.first + i);
    return run;
  }

  private store(page: number, bytes: Uint8Array): void {
    this.pages.delete(page);
    this.pages.set(page, bytes);
    while (this.pages.size > this.maxPages) {
      const oldest = this.pages.keys().next().value as number;
      this.pages.delete(oldest);
    }
  }

}
