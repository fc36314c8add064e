"""`zarrdb view FILE`: the browser viewer for a local .zarrdb file. The file and the viewer page
are served on the loopback interface (a free port; byte ranges, as a static web host serves
them) until Ctrl-C, and the address to open is printed."""

from __future__ import annotations

import argparse
import http.server
import json
import os
import re
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import zarrdb
from zarrdb.cli import common
from zarrdb.cli.framework import EXIT_OK, BadInput, say

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a .zarrdb file")
    parser.add_argument("--port", type=_port, default=0, help="the port (default: a free one)")
    parser.add_argument(
        "--viewer-dir",
        metavar="DIR",
        help="the built viewer page (index.html, viewer.js; default: the one built in js/)",
    )
    parser.epilog = common.epilog(
        "Only 127.0.0.1 listens, and only the file and the page are served. Build the page\n"
        "first with `npm ci && npm run build` in js/ of a checkout.",
        "zarrdb view data.zarrdb",
    )


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(
            f"a port number from 0 to 65535 (0: a free one), not {text!r}"
        )
    return int(text)


def viewer_dir(chosen: str | None) -> Path:
    """The directory of the built viewer page."""
    package = Path(zarrdb.__file__).resolve().parent
    candidates = (
        [Path(chosen)]
        if chosen
        else [
            package / "viewer",
            package.parents[1] / "js" / "dist" / "viewer",
            Path.cwd() / "js" / "dist" / "viewer",
        ]
    )
    for candidate in candidates:
        if (candidate / "index.html").is_file() and (candidate / "viewer.js").is_file():
            return candidate
    raise BadInput(
        "the viewer page is not built: run `npm ci && npm run build` in js/ of a zarrdb "
        "checkout, or pass --viewer-dir"
    )


def _handler(data: Path, page: Path) -> type[http.server.BaseHTTPRequestHandler]:
    name = urllib.parse.quote(data.name)
    files = {f"/data/{name}": data}
    files.update({f"/viewer/{f}": page / f for f in ("index.html", "viewer.js")})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if path == "/":
                self.send_response(302)
                self.send_header("Location", f"/viewer/index.html?url=/data/{name}")
                self.end_headers()
                return
            target = files.get(path)
            if target is None:
                self.send_error(404)
                return
            stat = target.stat()
            start, end, status = 0, stat.st_size - 1, 200
            match = _RANGE.match(self.headers.get("Range", ""))
            if match and (match.group(1) or match.group(2)):
                if match.group(1):
                    start = int(match.group(1))
                    end = min(end, int(match.group(2) or end))
                else:
                    start = max(0, stat.st_size - int(match.group(2)))
                if start >= stat.st_size or start > end:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{stat.st_size}")
                    self.end_headers()
                    return
                status = 206
            self.send_response(status)
            self.send_header("Content-Type", _TYPES.get(target.suffix, "application/octet-stream"))
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"')
            self.send_header("Cache-Control", "no-cache")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{stat.st_size}")
            self.end_headers()
            if body:
                with open(target, "rb") as f:
                    f.seek(start)
                    _copy(f, self.wfile, end - start + 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per range request would drown the address

    return Handler


def _copy(source: Any, sink: Any, length: int) -> None:
    while length > 0:
        block = source.read(min(length, 1 << 20))
        if not block:
            return
        sink.write(block)
        length -= len(block)


def serve(file: str, port: int = 0, page: str | None = None) -> http.server.ThreadingHTTPServer:
    """A server (not yet serving) of `file` and the viewer page on 127.0.0.1."""
    data = Path(file).resolve()
    if not data.is_file():
        raise BadInput(f"{file}: no such file")
    # Refuse what the page would refuse, here with the Python side's own message.
    store = zarrdb.SQLiteStore(os.fspath(data), read_only=True)
    try:
        store.get_sync("zarr.json")  # the store opens its file on first use
    finally:
        store.close()
    handler = _handler(data, viewer_dir(page))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


def run(args: argparse.Namespace) -> int:
    server = serve(args.file, args.port, args.viewer_dir)
    address = f"http://127.0.0.1:{server.server_address[1]}/"
    if args.json:
        print(json.dumps({"url": address, "file": os.path.abspath(args.file)}), flush=True)
    else:
        say(f"serving {args.file} at {address} (Ctrl-C to stop)")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        thread.join()
    finally:
        server.shutdown()
        server.server_close()
    return EXIT_OK


__all__ = ["add_arguments", "run", "serve"]
