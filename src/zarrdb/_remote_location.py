"""Where a remote file is and how it is read: URLs and their schemes, storage options, the
block cache's settings, and what a failed request is called in an error. Public through
zarrdb.remote; obstore is imported only when a location is used.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any, TypeGuard, TypeVar

from zarrdb import _tunables, errors

KIB = 1024
MIB = 1024 * KIB

# URL schemes read through obstore (its from_url knows each of them).
SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "http", "https")
"""The URL schemes `SQLiteStore` reads remotely (through obstore's `from_url`)."""

# obstore's HTTP client settings. storage_options may give them beside the store's own settings
# (as in {"endpoint": ..., "allow_http": True}); they are handed on as client_options.
_CLIENT_OPTIONS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "default_headers",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "root_certificate",
        "timeout",
        "user_agent",
    }
)

# Timeouts that end a request to a server gone silent in seconds. obstore's own defaults are a
# 5 s connect timeout, no read timeout and 30 s for a whole request, each retried for up to
# three minutes: a server that accepts connections and never answers held a command that long.
# A read timeout (the longest silence while waiting for or reading an answer) catches a stall;
# it never trips on a server that sends a byte every few seconds, which only the deadline of a
# whole request (`timeout`) ends. The largest request zarrdb makes is 16 MiB (a download's
# piece, a read-ahead run): 30 s is 0.5 MiB/s. storage_options override each.
DEFAULT_TIMEOUTS = {"connect_timeout": "5s", "read_timeout": "10s", "timeout": "30s"}
"""Client options a URL is read with unless its storage_options give them: `timeout` is the
deadline of a whole request (zarrdb also stops waiting for it then), `read_timeout` the
longest silence, `connect_timeout` the wait for a connection."""



def is_url(path: object) -> TypeGuard[str]:
    """Whether `path` is a URL that zarrdb reads remotely.

    True for a string whose scheme is one of `SCHEMES` (`s3://`, `gs://`, `az://`,
    `http(s)://`, ...).
    """
    if not isinstance(path, str):
        return False
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


def parse_options(pairs: Iterable[str]) -> dict[str, Any]:
    """`storage_options` from `KEY=VALUE` strings, as the command line takes them.

    `true` and `false` become booleans; everything else stays text (obstore parses numbers
    and durations itself).

    Raises
    ------
    ValueError
        For a string that is not `KEY=VALUE`.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"a storage option is KEY=VALUE, not {pair!r}")
        lowered = value.strip().lower()
        options[key.strip()] = (
            True if lowered == "true" else False if lowered == "false" else value.strip()
        )
    return options


def load_obstore() -> ModuleType:
    try:
        import obstore
    except ImportError:
        raise ImportError(
            "reading .zarrdb files from object storage or HTTP needs obstore: "
            'pip install "zarrdb[remote]"'
        ) from None
    return obstore


@dataclasses.dataclass(frozen=True)
class BlockCache:
    """How a remote file is cached and read.

    Pass one, or a dict of its fields, as `SQLiteStore(url, block_cache=...)`. Every field is
    a positive number of bytes, but `max_requests`, a count.

    Attributes
    ----------
    size : int
        Bytes of blocks kept in memory, shared by every thread of the store (least recently
        used dropped first). Default 64 MiB; at least one block.
    block_size : int
        The unit of caching and the smallest request. Default 1 MiB.
    readahead : int
        The longest request a sequential read grows to (each request right after the
        previous one is twice as long, and the next one is fetched in the background while
        the last is read). Default 16 MiB.
    min_request : int
        The least a miss fetches: the aligned span of this many bytes around it (its blocks
        not cached yet). At an object store's latency a request of a few MiB takes hardly
        longer than one of a few KiB, and the neighbours of a chunk are often read next.
        Default 4 MiB.
    first_read : int
        Bytes read by the opening request, which holds SQLite's header, the schema and the
        roots of the tables in a file written by zarrdb. Default 1 MiB.
    max_requests : int
        Requests in flight at once for this file, and reads of the store running at once
        (each in a thread of the store's own, off the event loop). Default 16.

    Raises
    ------
    ValueError
        For a field that is not a positive whole number, or a `size` below `block_size`.
    """

    size: int = _tunables.REMOTE_CACHE_BYTES
    block_size: int = _tunables.REMOTE_BLOCK_BYTES
    readahead: int = _tunables.REMOTE_READAHEAD_BYTES
    first_read: int = _tunables.REMOTE_FIRST_READ_BYTES
    min_request: int = _tunables.REMOTE_MIN_REQUEST_BYTES
    max_requests: int = _tunables.REMOTE_MAX_REQUESTS

    def __post_init__(self) -> None:
        for name in ("size", "block_size", "readahead", "first_read", "min_request", "max_requests"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(
                    f"block_cache {name} must be a positive whole number, not {value!r}"
                )
        if self.max_requests > 1024:
            raise ValueError(f"block_cache max_requests must be at most 1024, not {self.max_requests}")
        if self.size < self.block_size:
            raise ValueError(
                f"block_cache size ({self.size:,}) must hold at least one block "
                f"({self.block_size:,})"
            )

    @classmethod
    def from_options(cls, value: BlockCache | Mapping[str, int] | None) -> BlockCache:
        """A `BlockCache` from what `SQLiteStore(block_cache=...)` takes: one, a dict of its
        fields, or None for the defaults. ValueError for an unknown field."""
        if value is None:
            return cls()
        if isinstance(value, BlockCache):
            return value
        unknown = set(value) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(
                f"unknown block_cache option(s) {', '.join(sorted(unknown))}; "
                "known: size, block_size, readahead, first_read, min_request, max_requests"
            )
        return cls(**value)


def _split(url: str) -> tuple[str, str]:
    """('s3://bucket/dir', 'data.zarrdb') from 's3://bucket/dir/data.zarrdb'."""
    parts = urllib.parse.urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: URLs with a query or a fragment are not supported")
    base, _, name = url.rpartition("/")
    # A last segment of "." or ".." names a folder, not a file (and "a/b/.." is "a" to some
    # clients and a key to others).
    if urllib.parse.unquote(name) in ("", ".", "..") or not parts.path.strip("/"):
        raise ValueError(f"{url!r} names no file (expected e.g. s3://bucket/data.zarrdb)")
    return base, urllib.parse.unquote(name)


def _display(store: Any, path: str) -> str:
    """A URL-like name of `path` in an obstore store, for messages."""
    config = getattr(store, "config", None) or {}
    prefix = getattr(store, "prefix", None)
    where = "/".join(p for p in (str(prefix).strip("/") if prefix else "", path) if p)
    schemes = {"S3Store": "s3", "GCSStore": "gs", "AzureStore": "az"}
    kind = type(store).__name__
    if kind in schemes:
        bucket = config.get("bucket") or config.get("container_name") or ""
        return f"{schemes[kind]}://{bucket}/{where}"
    if kind == "HTTPStore":
        return str(store.url).rstrip("/") + "/" + path
    return f"{store!r}/{path}"


class RemoteLocation:
    """Where a remote .zarrdb file is: a URL with storage_options, or an obstore store and a
    path in it. Pickles as these (obstore stores pickle as their configuration)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        storage_options: Mapping[str, Any] | None = None,
        store: Any = None,
        path: str | None = None,
    ) -> None:
        if (url is None) == (store is None):
            raise TypeError("give either a URL or an obstore store and a path")
        self.storage_options = dict(storage_options or {})
        self.timeouts: dict[str, Any] = {}  # the client's timeouts, once its store is made
        self.base: str | None  # the URL's store (None: an obstore store was given)
        if url is not None:
            if not is_url(url):
                raise ValueError(
                    f"{url!r} is not a URL zarrdb reads remotely ({', '.join(SCHEMES)})"
                )
            self.base, self.path = _split(url)
            self.url = url
            self._store = None
        else:
            if not path or not isinstance(path, str):
                raise ValueError("from_object_store needs the path of the file in the store")
            self.base = None
            self.path = path.lstrip("/")
            self._store = store
            self.url = _display(store, self.path)

    def object_store(self) -> Any:
        """The obstore store (made from the URL and storage_options on first use)."""
        if self._store is None:
            obstore = load_obstore()
            options = dict(self.storage_options)
            client = dict(options.pop("client_options", None) or {})
            for key in list(options):
                if key in _CLIENT_OPTIONS:
                    client[key] = options.pop(key)
            client = {**DEFAULT_TIMEOUTS, **client}
            # A failed request is retried for as long as one read may stay silent: a stalled
            # server fails the request after one read timeout, not after ten.
            retry = dict(options.pop("retry_config", None) or {})
            retry.setdefault("retry_timeout", _duration(client["read_timeout"]))
            options["retry_config"] = retry
            self.timeouts = {k: v for k, v in client.items() if k.endswith("timeout")}
            try:
                self._store = obstore.store.from_url(
                    self.base, client_options=client or None, **options
                )
            except BaseException as exc:  # obstore raises pyo3's PanicException on bad keys
                if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
                    raise
                raise ValueError(
                    f"{self.url!r}: obstore cannot make a store from storage_options "
                    f"{sorted(self.storage_options)}: {_first_line(exc)}"
                ) from exc
        return self._store

    def deadline(self) -> float:
        """Seconds a request may take, whole: the client's `timeout` (DEFAULT_TIMEOUTS' unless
        storage_options or the obstore store's client options give another), and a grace."""
        self.object_store()
        given = self.timeouts.get("timeout")
        if given is None and self.base is None:
            given = (getattr(self._store, "client_options", None) or {}).get("timeout")
        seconds = _duration(given if given is not None else DEFAULT_TIMEOUTS["timeout"])
        return seconds.total_seconds() + _tunables.REMOTE_DEADLINE_GRACE

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = {"url": self.url, "storage_options": self.storage_options}
        if self.base is None:
            state.update(store=self._store, path=self.path)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "store" in state:
            self.__init__(store=state["store"], path=state["path"])  # type: ignore[misc]
        else:
            self.__init__(state["url"], storage_options=state["storage_options"])  # type: ignore[misc]

    def key(self) -> tuple[Any, ...]:
        """What tells this location from others with the same URL (other endpoints, options)."""
        if self.base is not None:
            return (self.url, repr(sorted(self.storage_options.items())))
        store = self._store
        return (
            self.url,
            type(store).__name__,
            repr(getattr(store, "config", None)),
            repr(getattr(store, "client_options", None)),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteLocation) and self.url == other.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __repr__(self) -> str:
        return f"RemoteLocation({self.url!r})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_DURATION_UNITS = {"ms": 0.001, "msec": 0.001, "s": 1, "sec": 1, "secs": 1, "m": 60, "min": 60,
                   "mins": 60, "h": 3600, "hr": 3600}  # fmt: skip


def _duration(value: Any) -> datetime.timedelta:
    """A timeout as obstore takes it (a timedelta, or text such as "10s", "1m 30s", "500ms")
    as a timedelta; DEFAULT_TIMEOUTS' read timeout for text in other units."""
    if isinstance(value, datetime.timedelta):
        return value
    text = str(value).strip().lower()
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", text)
    if parts and re.fullmatch(r"(?:\s*\d+(?:\.\d+)?\s*[a-z]+)+", text):
        if all(unit in _DURATION_UNITS for _, unit in parts):
            return datetime.timedelta(
                seconds=sum(float(n) * _DURATION_UNITS[unit] for n, unit in parts)
            )
    return _duration(DEFAULT_TIMEOUTS["read_timeout"])


def _why(exc: BaseException, location: RemoteLocation) -> str:
    """What went wrong with a request, in one line; a timeout names the settings."""
    text = str(exc)
    if isinstance(exc, TimeoutError) or "TimedOut" in text or "kind: Timeout" in text:
        limits = ", ".join(f"{k}={v}" for k, v in location.timeouts.items())
        return (
            "timed out: the server did not finish its answer within the request's deadline "
            f"or went silent{f' ({limits})' if limits else ''}; for a slow server give longer "
            "ones as storage options, e.g. timeout=120s (a whole request) or read_timeout=60s"
        )
    return _first_line(exc)


_E = TypeVar("_E", bound=errors.DiskIOError)


def request_error(
    cls: type[_E],
    what: str,
    exc: BaseException,
    location: RemoteLocation,
    *,
    then: str = "",
    extended_code: int | None = None,
) -> _E:
    """The `cls` error (RemoteReadError, RemoteWriteError) for a request to `location` that
    failed with `exc`: "WHAT: why it failed THEN", with SQLite's I/O error code."""
    return cls(
        f"{what}: {_why(exc, location)}{then}",
        code=errors.SQLITE_IOERR,
        extended_code=extended_code,
        filename=location.url,
    )
