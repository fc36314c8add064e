// A static file server on the loopback interface for tests and measurements: honours single
// byte ranges, sends an ETag and Last-Modified, honours If-Match, and counts requests and bytes.
// Misbehaviours on demand: ignore Range, stall, fail the first requests, change the object.
import { createServer } from "node:http";
import { createReadStream, statSync } from "node:fs";
import { extname, join, normalize, sep } from "node:path";

const TYPES = {
  ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
  ".css": "text/css", ".json": "application/json", ".map": "application/json",
};

/** Serves the files under `roots` (url prefix -> directory). */
export async function serve(roots, behaviour = {}) {
  const stats = { requests: 0, bytes: 0, log: [], inFlight: 0, maxInFlight: 0 };
  const server = createServer((req, res) => {
    stats.requests++;
    stats.inFlight++;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    res.on("close", () => stats.inFlight--);
    const url = new URL(req.url, "http://x");
    let file = null;
    for (const [prefix, dir] of Object.entries(roots)) {
      if (url.pathname.startsWith(prefix)) {
        const rel = normalize(decodeURIComponent(url.pathname.slice(prefix.length)));
        if (rel.startsWith("..") || rel.includes(`${sep}..`)) break;
        file = join(dir, rel);
        break;
      }
    }
    let stat;
    try {
      stat = file && statSync(file);
    } catch {
      stat = null;
    }
    if (!stat || !stat.isFile()) {
      res.writeHead(404).end();
      return;
    }
    if (behaviour.failFirst && behaviour.failFirst > 0) {
      behaviour.failFirst--;
      res.writeHead(503).end();
      return;
    }
    const version = behaviour.version ?? 1;
    const etag = `"${stat.size}-${stat.mtimeMs}-${version}"`;
    const headers = {
      "Content-Type": TYPES[extname(file)] ?? "application/octet-stream",
      "Accept-Ranges": behaviour.ignoreRange ? "none" : "bytes",
      ETag: etag,
      "Last-Modified": new Date(stat.mtimeMs).toUTCString(),
      "Cache-Control": "no-store",
    };
    if (req.headers["if-match"] && req.headers["if-match"] !== etag) {
      res.writeHead(412, headers).end();
      return;
    }
    const range = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? "");
    let start = 0;
    let end = stat.size - 1;
    let status = 200;
    if (range && !behaviour.ignoreRange) {
      if (range[1] === "") {
        start = Math.max(0, stat.size - Number(range[2]));
      } else {
        start = Number(range[1]);
        if (range[2] !== "") end = Math.min(end, Number(range[2]));
      }
      if (start >= stat.size || start > end) {
        res.writeHead(416, { ...headers, "Content-Range": `bytes */${stat.size}` }).end();
        return;
      }
      status = 206;
      headers["Content-Range"] = `bytes ${start}-${end}/${stat.size}`;
      // A hostile server: more bytes than asked for, under an honest-looking Content-Range.
      if (behaviour.oversend) end = Math.min(stat.size - 1, end + behaviour.oversend);
    }
    headers["Content-Length"] = String(end - start + 1);
    stats.log.push({ path: url.pathname, start, end, status });
    res.writeHead(status, headers);
    if (req.method === "HEAD") {
      res.end();
      return;
    }
    if (behaviour.stall) return; // headers sent, body never comes
    stats.bytes += end - start + 1;
    createReadStream(file, { start, end }).pipe(res);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    stats,
    behaviour,
    reset() {
      stats.requests = 0;
      stats.bytes = 0;
      stats.log = [];
      stats.maxInFlight = stats.inFlight;
    },
    close: () => new Promise((resolve) => { server.closeAllConnections?.(); server.close(resolve); }),
  };
}
