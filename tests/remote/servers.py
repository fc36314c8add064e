"""Real servers on 127.0.0.1 for the remote tests and benchmarks/remote.py, each counting on the
server side what it is asked for and what it sends.

- S3Server: moto's ThreadedMotoServer (an S3 protocol server), its WSGI application wrapped so
  that every request and every body byte sent is counted.
- HTTPServer: an aiohttp server of objects held in memory, honouring single-range `Range`
  requests, `ETag` and `If-Match` (as static file servers and CDNs do); it can be told to fail
  requests, to answer slowly, or to ignore If-Match.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

REGION = "us-east-1"
ACCESS_KEY = "testing"
SECRET_KEY = "testing"


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    status: int = 0
    sent: int = 0  # body bytes


@dataclass
class Traffic:
    """What a server was asked for, in order; thread-safe."""

    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()

    def reads(self, path_suffix: str = "") -> list[Request]:
        """GET and HEAD requests for paths ending in `path_suffix`."""
        with self.lock:
            return [
                r
                for r in self.requests
                if r.method in ("GET", "HEAD") and r.path.endswith(path_suffix)
            ]

    def count(self, path_suffix: str = "") -> int:
        return len(self.reads(path_suffix))

    def bytes_sent(self, path_suffix: str = "") -> int:
        return sum(r.sent for r in self.reads(path_suffix))


class _CountingApp:
    """WSGI middleware: records each request and the body bytes of its response."""

    def __init__(self, app: Any, traffic: Traffic) -> None:
        self.app = app
        self.traffic = traffic

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(
            environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), environ.get("HTTP_RANGE")
        )
        self.traffic.add(request)

        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            request.status = int(status.split()[0])
            return (
                start_response(status, headers, exc_info)
                if exc_info
                else start_response(status, headers)
            )

        for chunk in self.app(environ, start):
            request.sent += len(chunk)
            yield chunk


class S3Server:
    """moto's S3 server on 127.0.0.1 (a free port), counting requests and bytes."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.traffic = Traffic()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)

    def start(self) -> S3Server:
        self._server.start()
        wsgi = self._server._server  # werkzeug's server: it calls .app for every request
        wsgi.app = _CountingApp(wsgi.app, self.traffic)
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self._server.stop()

    @property
    def storage_options(self) -> dict[str, Any]:
        """What SQLiteStore(storage_options=...) needs to reach this server."""
        return {
            "endpoint": self.endpoint,
            "region": REGION,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
            "allow_http": True,
            "retry_config": {"max_retries": 0},
        }

    def object_store(self, bucket: str, prefix: str = "") -> Any:
        """An obstore S3Store on `bucket` (and `prefix`) of this server."""
        from obstore.store import S3Store

        options = dict(self.storage_options)
        client = {"allow_http": options.pop("allow_http")}
        retry = options.pop("retry_config")
        return S3Store(
            bucket, prefix=prefix or None, client_options=client, retry_config=retry, **options
        )

    def new_bucket(self) -> str:
        """A new, empty bucket (moto keeps one state per process: every test gets its own)."""
        import boto3

        name = f"zarrdb-{uuid.uuid4().hex[:12]}"
        boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        ).create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes) -> None:
        import obstore

        obstore.put(self.object_store(bucket), key, data)


def etag_of(data: bytes) -> str:
    return '"' + hashlib.sha1(data).hexdigest() + '"'


class HTTPServer:
    """An aiohttp server on 127.0.0.1 serving `objects` (path -> bytes) with Range, ETag and
    If-Match, in a thread of its own."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.etags: dict[str, str] = {}
        self.traffic = Traffic()
        self.fail_next = 0  # answer this many of the next requests with 500
        self.fail_from_offset: int | None = None  # answer ranges starting there or later with 500
        self.delay = 0.0  # seconds to wait before answering each request
        self.ignore_if_match = False
        self.send_etag = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def put(self, path: str, data: bytes) -> None:
        self.objects[path.lstrip("/")] = bytes(data)
        self.etags[path.lstrip("/")] = etag_of(data)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> HTTPServer:
        from aiohttp import web

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)

        async def serve() -> None:
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()
            ready.set()

        def run() -> None:
            assert self._loop is not None
            self._loop.run_until_complete(serve())
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="zarrdb-test-http", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the test HTTP server did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        self._loop.close()
        self._loop = None

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        record = Request(
            request.method, "/" + request.match_info["path"], request.headers.get("Range")
        )
        self.traffic.add(record)
        if self.delay:
            await asyncio.sleep(self.delay)
        starts_late = self.fail_from_offset is not None and (
            _range_start(record.range) >= self.fail_from_offset
        )
        if self.fail_next > 0 or starts_late:
            self.fail_next = max(0, self.fail_next - 1)
            record.status = 500
            return web.Response(status=500, text="injected failure")
        data = self.objects.get(request.match_info["path"])
        if data is None or request.method not in ("GET", "HEAD"):
            record.status = 404 if data is None else 405
            return web.Response(status=record.status)
        etag = self.etags[request.match_info["path"]]
        headers = {"Accept-Ranges": "bytes"}
        if self.send_etag:
            headers["ETag"] = etag
        wanted = request.headers.get("If-Match")
        if wanted and not self.ignore_if_match and wanted.strip() not in ("*", etag):
            record.status = 412
            return web.Response(status=412, headers=headers)
        status, body = 200, data
        spec = request.headers.get("Range")
        if spec:
            span = _parse_range(spec, len(data))
            if span is None:
                record.status = 416
                headers["Content-Range"] = f"bytes */{len(data)}"
                return web.Response(status=416, headers=headers)
            start, stop = span
            status, body = 206, data[start:stop]
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{len(data)}"
        record.status = status
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(body))
            return web.Response(status=status, headers=headers)
        record.sent = len(body)
        return web.Response(status=status, body=body, headers=headers)


def _range_start(spec: str | None) -> int:
    first = (spec or "bytes=0-").partition("=")[2].partition("-")[0]
    return int(first) if first else 0


def _parse_range(spec: str, size: int) -> tuple[int, int] | None:
    """(start, stop) of a single `bytes=` range, clamped to the size; None if unsatisfiable."""
    unit, _, ranges = spec.partition("=")
    if unit.strip() != "bytes" or "," in ranges:
        return None
    first, _, last = ranges.strip().partition("-")
    if not first:
        n = int(last)
        return (max(0, size - n), size) if n > 0 and size else None
    start = int(first)
    stop = size if not last else min(size, int(last) + 1)
    return (start, stop) if start < size and start < stop else None
