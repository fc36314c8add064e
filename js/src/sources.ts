/** Where the bytes of a file come from: a `Blob`/`File`, memory, or a URL read by ranges. */

import { ObjectChangedError, RangeNotSupportedError, SourceError } from "./errors.js";

/** Random access to an immutable sequence of bytes of a known size. */
export interface Source {
  readonly size: number;
  /** Exactly `length` bytes from `offset`; both lie within the source. */
  read(offset: number, length: number, signal?: AbortSignal): Promise<Uint8Array>;
  /** A name for messages (a URL, a file name). */
  readonly name: string;
}

function checkBounds(source: Source, offset: number, length: number): void {
  if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0
    || offset + length > source.size) {
    throw new RangeError(`bytes ${offset}+${length} lie outside ${source.name} (${source.size} bytes)`);
  }
}

export class MemorySource implements Source {
  readonly size: number;
  constructor(private readonly bytes: Uint8Array, readonly name = "memory") {
    this.size = bytes.length;
  }
  async read(offset: number, length: number): Promise<Uint8Array> {
    checkBounds(this, offset, length);
    return this.bytes.slice(offset, offset + length);
  }
}

/** A `Blob` or a `File` (a file dropped on a page): read by slices, never whole. */
export class BlobSource implements Source {
  readonly size: number;
  readonly name: string;
  constructor(private readonly blob: Blob, name?: string) {
    this.size = blob.size;
    this.name = name ?? ((blob as File).name || "blob");
  }
  async read(offset: number, length: number): Promise<Uint8Array> {
    checkBounds(this, offset, length);
    const bytes = new Uint8Array(await this.blob.slice(offset, offset + length).arrayBuffer());
    if (bytes.length !== length) {
      throw new ObjectChangedError(`${this.name} changed while it was read`);
    }
    return bytes;
  }
}

export interface HttpOptions {
  /** Extra request headers and settings (credentials, mode) for every request. */
  init?: RequestInit;
  /** A request that receives no bytes for this long is aborted and retried (ms). */
  stallTimeout?: number;
  /** Each request is given up after this long, retries included (ms). */
  deadline?: number;
  /** Further attempts after a failed request (network error, timeout, 5xx, 429). */
  retries?: number;
  /** Send `If-Match` with the ETag pinned at open. Default: for same-origin URLs only, since
   * the header makes a cross-origin request need a CORS preflight the host may not answer. */
  conditional?: boolean;
  fetch?: typeof fetch;
}

const RETRY_STATUS = new Set([408, 425, 429, 500, 502, 503, 504]);

class Retryable extends SourceError {}

function sameOrigin(url: string): boolean {
  const here = (globalThis as { location?: Location }).location;
  if (!here) return true;
  try {
    return new URL(url, here.href).origin === here.origin;
  } catch {
    return false;
  }
}

function parseContentRange(header: string | null): { start: number; end: number; total: number | null } | null {
  const match = header && /^bytes\s+(\d+)-(\d+)\/(\d+|\*)$/i.exec(header.trim());
  if (!match) return null;
  return {
    start: Number(match[1]),
    end: Number(match[2]),
    total: match[3] === "*" ? null : Number(match[3]),
  };
}

/** Reads a body but no more than `cap` bytes, aborting when nothing arrives for `stall` ms. */
async function readCapped(response: Response, cap: number, stall: number, abort: () => void): Promise<Uint8Array> {
  const declared = response.headers.get("content-length");
  if (declared !== null && Number(declared) > cap) {
    abort();
    throw new SourceError(`the server sent ${declared} bytes where at most ${cap} were asked for`);
  }
  if (!response.body) return new Uint8Array(await response.arrayBuffer());
  const reader = response.body.getReader();
  const out = new Uint8Array(cap);
  let filled = 0;
  for (;;) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stalled = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Retryable(`no bytes for ${stall} ms`)), stall);
    });
    let step: ReadableStreamReadResult<Uint8Array>;
    try {
      step = await Promise.race([reader.read(), stalled]);
    } catch (error) {
      abort();
      reader.cancel().catch(() => {});
      throw error;
    } finally {
      clearTimeout(timer);
    }
    if (step.done) break;
    if (filled + step.value.length > cap) {
      abort();
      reader.cancel().catch(() => {});
      throw new SourceError(`the server sent more than the ${cap} bytes asked for`);
    }
    out.set(step.value, filled);
    filled += step.value.length;
  }
  return out.subarray(0, filled);
}

/** A file on a web server read with HTTP range requests, its version pinned at open. */
export class HttpSource implements Source {
  size = 0;
  etag: string | null = null;
  lastModified: string | null = null;
  /** Requests sent and body bytes received, for measurements. */
  requests = 0;
  bytes = 0;
  private whole: Uint8Array | null = null;
  private readonly fetcher: typeof fetch;
  private readonly stall: number;
  private readonly deadline: number;
  private readonly retries: number;
  private readonly conditional: boolean;

  private constructor(readonly name: string, private readonly options: HttpOptions) {
    this.fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.stall = options.stallTimeout ?? 20_000;
    this.deadline = options.deadline ?? 120_000;
    this.retries = options.retries ?? 3;
    this.conditional = options.conditional ?? sameOrigin(name);
  }

  /** Opens `url` with one request for its first `head` bytes, which it returns. */
  static async open(url: string | URL, head: number, options: HttpOptions = {}): Promise<{ source: HttpSource; head: Uint8Array }> {
    const source = new HttpSource(String(url), options);
    const first = await source.request(0, head, true);
    return { source, head: first };
  }

  async read(offset: number, length: number): Promise<Uint8Array> {
    checkBounds(this, offset, length);
    if (length === 0) return new Uint8Array(0);
    if (this.whole) return this.whole.slice(offset, offset + length);
    return this.request(offset, length, false);
  }

  private async request(offset: number, length: number, opening: boolean): Promise<Uint8Array> {
    const started = Date.now();
    let failure: unknown;
    for (let attempt = 0; attempt <= this.retries; attempt++) {
      if (attempt > 0) {
        const pause = Math.min(200 * 2 ** (attempt - 1), 5000);
        if (Date.now() + pause - started > this.deadline) break;
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
      try {
        return await this.attempt(offset, length, opening);
      } catch (error) {
        if (!(error instanceof Retryable) && !(error instanceof TypeError)) throw error;
        failure = error;
      }
    }
    const reason = failure instanceof Error ? failure.message : String(failure);
    throw new SourceError(`${this.name}: bytes ${offset}+${length} could not be read (${reason})`);
  }

  private async attempt(offset: number, length: number, opening: boolean): Promise<Uint8Array> {
    const controller = new AbortController();
    const headers = new Headers(this.options.init?.headers);
    headers.set("Range", `bytes=${offset}-${offset + length - 1}`);
    if (!opening && this.conditional && this.etag && !this.etag.startsWith("W/")) {
      headers.set("If-Match", this.etag);
    }
    const timer = setTimeout(() => controller.abort(), this.stall);
    let response: Response;
    this.requests++;
    try {
      response = await this.fetcher(this.name, { ...this.options.init, headers, signal: controller.signal });
    } catch (error) {
      throw new Retryable(error instanceof Error ? error.message : String(error));
    } finally {
      clearTimeout(timer);
    }
    const abort = () => controller.abort();
    if (response.status === 412) {
      abort();
      throw new ObjectChangedError(`${this.name} changed since it was opened (412 Precondition Failed)`);
    }
    if (RETRY_STATUS.has(response.status)) {
      abort();
      throw new Retryable(`status ${response.status}`);
    }
    if (opening && response.status === 416) {
      abort();
      throw new SourceError(`${this.name} is empty (416 Range Not Satisfiable)`);
    }
    if (response.status === 200) {
      // A server that ignores Range sends the whole object: fine for a file no bigger than the
      // first read, an error for anything bigger (reading it whole is what ranges are for).
      const declared = Number(response.headers.get("content-length") ?? NaN);
      if (!opening || !(declared <= length)) {
        abort();
        throw new RangeNotSupportedError(
          `${this.name}: the server ignores Range requests (it answered 200 with the whole ` +
          `object${Number.isFinite(declared) ? ` of ${declared} bytes` : ""}); serve the file from a host ` +
          "that supports byte ranges (most static hosts, S3, nginx, Apache do)");
      }
      const body = await readCapped(response, length, this.stall, abort);
      this.bytes += body.length;
      this.pin(response, body.length);
      this.whole = body;
      return body.slice(offset, offset + length);
    }
    if (response.status !== 206) {
      abort();
      const what = response.status === 404 ? "not found (404)" : `status ${response.status}`;
      throw new SourceError(`${this.name}: ${what}`);
    }
    const range = parseContentRange(response.headers.get("content-range"));
    if (opening) {
      let total = range?.total ?? null;
      if (total === null) total = await this.headSize();
      this.pin(response, total);
    } else {
      this.checkVersion(response, range?.total ?? null);
    }
    const expected = Math.min(length, this.size - offset);
    if (range && (range.start !== offset || range.end !== offset + expected - 1)) {
      abort();
      throw new SourceError(`${this.name}: asked for bytes ${offset}-${offset + expected - 1}, got ${range.start}-${range.end}`);
    }
    const body = await readCapped(response, expected, this.stall, abort);
    this.bytes += body.length;
    if (body.length !== expected) {
      throw new Retryable(`a short body: ${body.length} of ${expected} bytes`);
    }
    return body;
  }

  /** The size from a HEAD request, for servers that do not expose Content-Range. */
  private async headSize(): Promise<number> {
    this.requests++;
    const response = await this.fetcher(this.name, { ...this.options.init, method: "HEAD" });
    const size = Number(response.headers.get("content-length") ?? NaN);
    if (!response.ok || !Number.isSafeInteger(size)) {
      throw new SourceError(`${this.name}: the server tells neither Content-Range nor Content-Length`);
    }
    return size;
  }

  private pin(response: Response, size: number): void {
    this.size = size;
    this.etag = response.headers.get("etag");
    this.lastModified = response.headers.get("last-modified");
  }

  private checkVersion(response: Response, total: number | null): void {
    const etag = response.headers.get("etag");
    const modified = response.headers.get("last-modified");
    const changed = (total !== null && total !== this.size)
      || (etag !== null && this.etag !== null && etag !== this.etag)
      || (etag === null && modified !== null && this.lastModified !== null && modified !== this.lastModified);
    if (changed) {
      throw new ObjectChangedError(`${this.name} changed since it was opened (its size, ETag or Last-Modified differs)`);
    }
  }
}
