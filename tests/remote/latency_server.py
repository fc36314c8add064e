"""A Range-capable HTTP server on 127.0.0.1 that answers like an object store far away: each
request waits `latency` seconds before its answer starts, and all bodies together are sent at
no more than `bandwidth` bytes per second. Used by the remote tests and benchmarks/remote.py.

    with LatencyServer(latency=0.03) as server:
        server.put("data.zarrdb", data)
        SQLiteStore(server.url + "data.zarrdb", read_only=True, storage_options={"allow_http": True})

One thread per connection (http.server's ThreadingHTTPServer, HTTP/1.1 keep-alive), so requests
on different connections are served at the same time, as a real object store serves them. It
counts requests, body bytes and the most requests in flight at once; it honours single
`Range`s, `ETag` and `If-Match`; it can fail every n-th request or stall one (for the error
tests). Loopback only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from .servers import _parse_range

SEND_PIECE = 64 * 1024  # bytes written at a time when a bandwidth limit is set
BURST = 1024 * 1024  # bytes a sender late by as much may send at once
CONTROL = "/_control/"  # requests to this path drive a server in another process; not counted


@dataclass
class Counters:
    requests: int = 0
    bytes: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    failed: int = 0
    ranges: list[tuple[str, str | None]] = field(default_factory=list)


class _Bandwidth:
    """A shared budget of bytes per second: `take(n)` returns once n more bytes may go out."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.lock = threading.Lock()
        self.next_free = 0.0  # the time at which everything granted so far has gone out

    def take(self, n: int) -> None:
        if not self.rate:
            return
        with self.lock:
            now = time.monotonic()
            # A sleep that overran is made up for by a burst of up to BURST bytes: the rate
            # holds on average, as a link's does, however late the sender wakes.
            start = max(now - BURST / self.rate, self.next_free)
            self.next_free = start + n / self.rate
            wait = self.next_free - now
        if wait > 0:
            time.sleep(wait)


class LatencyServer:
    """The server; `latency` in seconds per request, `bandwidth` in bytes per second for all
    bodies together (None: unlimited). Both may be changed while it runs."""

    def __init__(self, latency: float = 0.0, bandwidth: float | None = None) -> None:
        self.latency = latency
        self._bandwidth = _Bandwidth(bandwidth)
        self.objects: dict[str, bytes] = {}
        self.etags: dict[str, str] = {}
        self.fail_every = 0  # answer every n-th request with 503 (0: never)
        self.stall: float = 0.0  # extra seconds before answering each request (for close tests)
        self.lock = threading.Lock()
        self.counters = Counters()
        self._seen = 0
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def bandwidth(self) -> float | None:
        return self._bandwidth.rate

    @bandwidth.setter
    def bandwidth(self, rate: float | None) -> None:
        self._bandwidth = _Bandwidth(rate)

    # --- content -----------------------------------------------------------------------------

    def put(self, path: str, data: bytes) -> None:
        """Serve `data` at `path` (replacing what was there: a new ETag)."""
        path = path.lstrip("/")
        with self.lock:
            self.objects[path] = bytes(data)
            self.etags[path] = '"' + hashlib.sha1(data).hexdigest() + '"'

    def put_tree(self, root: Any, prefix: str) -> int:
        """Serve every file below the local folder `root` at `prefix/<relative path>`; how many."""
        return _put_tree(self, root, prefix)

    def set(self, *, latency: float | None = None, bandwidth: float | None = None) -> None:
        """Change the latency (seconds) or the bandwidth (bytes per second; 0: unlimited)."""
        if latency is not None:
            self.latency = latency
        if bandwidth is not None:
            self.bandwidth = bandwidth or None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/"

    # --- counting ----------------------------------------------------------------------------

    def reset(self) -> None:
        with self.lock:
            in_flight = self.counters.in_flight
            self.counters = Counters(in_flight=in_flight, peak_in_flight=in_flight)

    def snapshot(self) -> Counters:
        with self.lock:
            c = self.counters
            return Counters(c.requests, c.bytes, c.in_flight, c.peak_in_flight, c.failed, list(c.ranges))

    # --- running -----------------------------------------------------------------------------

    def start(self) -> LatencyServer:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.request_queue_size = 128
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
            name="zarrdb-test-latency-server",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(10)
            self._server = None

    def __enter__(self) -> LatencyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_owner: LatencyServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        if self.path.startswith(CONTROL):
            self._control()
            return
        self._answer(body=True)

    def do_PUT(self) -> None:
        if not self.path.startswith(CONTROL + "put/"):
            self._empty(405)
            return
        length = int(self.headers.get("Content-Length", "0"))
        self.server_owner.put(self.path[len(CONTROL + "put/"):], self.rfile.read(length))
        self._empty(200)

    def _control(self) -> None:
        """The uncounted requests by which a LatencyServer in another process is driven."""
        owner = self.server_owner
        command, _, query = self.path[len(CONTROL):].partition("?")
        args = dict(urllib.parse.parse_qsl(query))
        if command == "set":
            if "latency" in args:
                owner.latency = float(args["latency"])
            if "bandwidth" in args:
                owner.bandwidth = float(args["bandwidth"]) or None
        elif command == "reset":
            owner.reset()
        elif command != "stats":
            self._empty(404)
            return
        body = json.dumps(dataclasses.asdict(owner.snapshot())).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _answer(self, body: bool) -> None:
        owner = self.server_owner
        path = self.path.split("?", 1)[0].lstrip("/")
        spec = self.headers.get("Range")
        with owner.lock:
            owner._seen += 1
            seen = owner._seen
            c = owner.counters
            c.requests += 1
            c.in_flight += 1
            c.peak_in_flight = max(c.peak_in_flight, c.in_flight)
            c.ranges.append((path, spec))
            data = owner.objects.get(path)
            etag = owner.etags.get(path)
            fail = owner.fail_every and seen % owner.fail_every == 0
        try:
            delay = owner.latency + owner.stall
            if delay:
                time.sleep(delay)
            if fail:
                with owner.lock:
                    owner.counters.failed += 1
                self._empty(503)
                return
            if data is None:
                self._empty(404)
                return
            wanted = self.headers.get("If-Match")
            if wanted and wanted.strip() not in ("*", etag):
                self._empty(412, etag)
                return
            status, start, stop = 200, 0, len(data)
            if spec:
                span = _parse_range(spec, len(data))
                if span is None:
                    self._empty(416, etag, {"Content-Range": f"bytes */{len(data)}"})
                    return
                status, (start, stop) = 206, span
            self.send_response(status)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", etag or "")
            self.send_header("Content-Length", str(stop - start))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
            self.end_headers()
            if body:
                self._send(memoryview(data)[start:stop])
        finally:
            with owner.lock:
                owner.counters.in_flight -= 1

    def _send(self, view: memoryview) -> None:
        owner = self.server_owner
        piece = SEND_PIECE if owner.bandwidth else len(view) or 1
        for at in range(0, len(view), piece):
            part = view[at : at + piece]
            owner._bandwidth.take(len(part))
            self.wfile.write(part)
            with owner.lock:
                owner.counters.bytes += len(part)

    def _empty(self, status: int, etag: str | None = None, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if etag:
            self.send_header("ETag", etag)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()



def _put_tree(server: Any, root: Any, prefix: str) -> int:
    from pathlib import Path

    count = 0
    for file in sorted(Path(root).rglob("*")):
        if file.is_file():
            server.put(f"{prefix.strip('/')}/{file.relative_to(root).as_posix()}", file.read_bytes())
            count += 1
    return count


def serve_forever(latency: float, bandwidth: float | None) -> None:
    """The body of a LatencyServer's own process: print the port, serve until killed."""
    server = LatencyServer(latency, bandwidth).start()
    assert server._server is not None
    print(server._server.server_address[1], flush=True)
    threading.Event().wait()


class LatencyServerProcess:
    """A LatencyServer in a process of its own (so that sending bodies does not take the GIL
    from the client measured), driven through its control path; the same interface."""

    def __init__(self, latency: float = 0.0, bandwidth: float | None = None) -> None:
        self._args = (latency, bandwidth)
        self._process: Any = None
        self.url = ""

    def start(self) -> LatencyServerProcess:
        tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = (
            f"import sys; sys.path.insert(0, {tests!r}); "
            "from remote.latency_server import serve_forever; "
            f"serve_forever({self._args[0]!r}, {self._args[1]!r})"
        )
        self._process = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
        )
        assert self._process.stdout is not None
        port = self._process.stdout.readline().strip()
        if not port.isdigit():
            self.stop()
            raise RuntimeError("the latency server's process did not start")
        self.url = f"http://127.0.0.1:{port}/"
        return self

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)
            self._process = None

    def __enter__(self) -> LatencyServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, command: str, data: bytes | None = None) -> Counters:
        request = urllib.request.Request(
            self.url.rstrip("/") + CONTROL + command, data=data, method="PUT" if data else "GET"
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            body = answer.read()
        return Counters(**json.loads(body)) if body else Counters()

    def put(self, path: str, data: bytes) -> None:
        self._call("put/" + path.lstrip("/"), bytes(data))

    def put_tree(self, root: Any, prefix: str) -> int:
        return _put_tree(self, root, prefix)

    def set(self, *, latency: float | None = None, bandwidth: float | None = None) -> None:
        query = {k: v for k, v in (("latency", latency), ("bandwidth", bandwidth)) if v is not None}
        self._call("set?" + urllib.parse.urlencode(query))

    def reset(self) -> None:
        self._call("reset")

    def snapshot(self) -> Counters:
        c = self._call("stats")
        c.ranges = [tuple(r) for r in c.ranges]  # type: ignore[misc]
        return c
