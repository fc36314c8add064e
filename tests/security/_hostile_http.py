"""A hostile HTTP server on 127.0.0.1 for the security tests: it serves one object and answers
its requests the way it is told to misbehave. Written on raw sockets (not aiohttp, as
tests/remote/servers.py is), since the lies it tells are ones a well-behaved framework refuses
to send: a body longer than its Content-Range, a Content-Range of other bytes, no answer at all.

    with HostileServer(data, "stall") as server:
        ... server.url("data.zarrdb") ...
        server.asked.wait(30)           # a request arrived

Every loop is bounded (by the bytes to send, or by the server being stopped) and every socket
has a timeout, so a test that goes wrong ends.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

MIB = 1024 * 1024

# How each behaviour answers a GET; the first request of an object is always the opening one.
BEHAVIOURS = (
    "honest",  # single ranges with Content-Range, ETag (as static file servers do)
    "stall",  # reads the request and never answers (holds the connection until stopped)
    "stall_after_first",  # answers the first request honestly, then stalls
    "longer",  # honest headers, then a body of `huge` bytes whatever the range asked
    "ignore_range",  # 200 with the whole object
    "etag_change",  # each answer has another ETag (If-Match ignored): the object keeps changing
    "redirect_loop",  # 302 to the URL asked for
    "content_range_lie",  # a Content-Range of bytes one further than asked (and those bytes)
    "trickle",  # honest headers, then the body one byte every `interval` seconds
    "trickle_after_first",  # answers the first request honestly, then trickles
    "claim_size",  # honest ranges of an object said to be `huge` bytes long (zeros past the data)
)


@dataclass
class Seen:
    """One request: when it arrived (time.time()), its method, path and Range header."""

    at: float
    method: str
    path: str
    range: str | None


class HostileServer:
    """Serves `data` at every path, misbehaving as `behaviour` (one of BEHAVIOURS) says."""

    def __init__(
        self,
        data: bytes,
        behaviour: str = "honest",
        *,
        huge: int = 300 * MIB,
        interval: float = 2.0,
    ) -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}")
        self.data = bytes(data)
        self.behaviour = behaviour
        self.huge = huge
        self.interval = interval
        self.requests: list[Seen] = []
        self.asked = threading.Event()  # set when the first request arrives
        # once set, every request from then on is held unanswered, whatever the behaviour
        self.stalling = threading.Event()
        self.stalled = threading.Event()  # set when a request is held so
        self.sent = 0  # body bytes sent, all requests together
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._threads: list[threading.Thread] = []

    def url(self, name: str = "data.zarrdb") -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def __enter__(self) -> HostileServer:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(10)
        self._sock.close()

    def _spawn(self, target, *args) -> None:  # noqa: ANN001
        thread = threading.Thread(target=target, args=args, daemon=True, name="hostile-http")
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            conn.settimeout(5)
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = self._read_request(conn)
                if request is not None:
                    self._answer(conn, *request)
            except OSError:  # the client went away: what these tests hope for
                pass

    def _read_request(self, conn: socket.socket) -> tuple[Seen, dict[str, str], int] | None:
        raw = b""
        while b"\r\n\r\n" not in raw:
            if len(raw) > 64 * 1024 or self._stop.is_set():
                return None
            chunk = conn.recv(4096)
            if not chunk:
                return None
            raw += chunk
        line, *fields = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        method, path = line.split(" ")[:2]
        headers = {}
        for field in fields:
            name, _, value = field.partition(":")
            headers[name.strip().lower()] = value.strip()
        seen = Seen(time.time(), method, path, headers.get("range"))
        with self._lock:
            self.requests.append(seen)
            number = len(self.requests)
        self.asked.set()
        return seen, headers, number

    def _answer(
        self, conn: socket.socket, seen: Seen, headers: dict[str, str], number: int
    ) -> None:
        behaviour = self.behaviour
        if behaviour.endswith("_after_first"):
            behaviour = "honest" if number == 1 else behaviour.removesuffix("_after_first")
        if self.stalling.is_set():
            behaviour = "stall"
            self.stalled.set()
        if behaviour == "stall":
            self._stop.wait(60)  # holds the connection open, answering nothing
            return
        if behaviour == "redirect_loop":
            self._send(conn, "302 Found", {"Location": seen.path, "Content-Length": "0"}, b"")
            return
        size = self.huge if behaviour == "claim_size" else len(self.data)
        etag = f'"v{number if behaviour == "etag_change" else 1}"'
        start, stop = _span(seen.range, size)
        if behaviour == "ignore_range" or seen.range is None:
            self._send(conn, "200 OK", {"ETag": etag, "Content-Length": str(size)}, self.data)
            return
        if behaviour == "content_range_lie":
            start, stop = start + 1, min(size, stop + 1)
        fields = {"ETag": etag, "Content-Range": f"bytes {start}-{stop - 1}/{size}"}
        body = self.data[start:stop]
        if behaviour == "claim_size":
            body += bytes(stop - start - len(body))
        if behaviour == "trickle":
            fields["Content-Length"] = str(len(body))
            self._send(conn, "206 Partial Content", fields, b"")
            for i in range(len(body)):
                if self._stop.wait(self.interval):
                    return
                conn.sendall(body[i : i + 1])
                self._count(1)
            return
        if behaviour == "longer":
            fields["Content-Length"] = str(self.huge)
            self._send(conn, "206 Partial Content", fields, body)
            self._send_filler(conn, self.huge - len(body))
            return
        fields["Content-Length"] = str(len(body))
        self._send(conn, "206 Partial Content", fields, body)

    def _send(self, conn: socket.socket, status: str, fields: dict[str, str], body: bytes) -> None:
        head = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
        conn.sendall((head + "Connection: close\r\n\r\n").encode("latin-1") + body)
        self._count(len(body))

    def _send_filler(self, conn: socket.socket, n: int) -> None:
        block = b"\xa5" * (256 * 1024)
        while n > 0 and not self._stop.is_set():
            piece = block[: min(n, len(block))]
            conn.sendall(piece)
            self._count(len(piece))
            n -= len(piece)

    def _count(self, n: int) -> None:
        with self._lock:
            self.sent += n


def _span(spec: str | None, size: int) -> tuple[int, int]:
    """(start, stop) of a single `bytes=A-B` or `bytes=A-` range, clamped to `size`."""
    if not spec:
        return 0, size
    first, _, last = spec.partition("=")[2].partition("-")
    start = int(first or 0)
    return start, min(size, int(last) + 1) if last else size


def sqlite_looking(size: int) -> bytes:
    """`size` bytes (a multiple of 4096) that start as an SQLite database in rollback mode
    (enough for the checks a remote file passes before anything else is read)."""
    header = bytearray(b"SQLite format 3\x00" + bytes(84))
    header[16:18] = (4096).to_bytes(2, "big")  # page size
    header[18] = header[19] = 1  # file format 1: rollback journal, not WAL
    header[28:32] = (size // 4096).to_bytes(4, "big")  # the page count, valid for change 0
    return bytes(header) + bytes(size - len(header))
