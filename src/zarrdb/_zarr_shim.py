"""Everything zarrdb reads of zarr's private state, in one place.

zarr gives no public way to tell whether the calling thread is one of its codec worker threads;
explicit transactions need to know (those threads work for the caller that opened the
transaction but do not carry its context). tests/store/test_zarr_shim.py fails loudly when a
zarr release moves what this module reads.
"""

from __future__ import annotations

import threading


def codec_pool() -> object | None:
    """zarr's module-level codec thread pool (zarr 3.2+, once started), or None."""
    try:
        from zarr.core import codec_pipeline
    except ImportError:  # pragma: no cover - zarr without the module
        return None
    return getattr(codec_pipeline, "_pool", None)


def codec_pool_thread_ids() -> frozenset[int]:
    """Thread ids of zarr's codec thread pool (empty if zarr has none or has not started it)."""
    pool = codec_pool()
    if pool is None:
        return frozenset()
    return frozenset(t.ident for t in list(getattr(pool, "_threads", ())) if t.ident is not None)


def in_codec_pool() -> bool:
    """True on one of zarr's codec worker threads."""
    return threading.get_ident() in codec_pool_thread_ids()
