"""zarr's Hypothesis state machines (`zarr.testing.stateful`) run against SQLiteStore.

- `ZarrStoreStateMachine` drives the Store API (set/get/get_partial_values/delete/clear/exists/
  is_empty/list, and getsize_prefix on newer zarr) and compares with a dict model;
- `ZarrHierarchyStateMachine` drives zarr itself (groups, arrays, indexing, resize, delete_dir,
  `del group[name]`, list_dir) and compares with a MemoryStore model.

Every example gets a new `.zarrdb` file. Both machines are subclassed to add rules a
file-backed store needs on top of zarr's: close the store and continue on a new SQLiteStore
object for the same file (what was committed must still be there), and look at the file
through a second, read-only SQLiteStore opened alongside the writer (committed writes must be
visible to other connections, not just to the writer's own). The store machine also drives
the parts of the Store API zarr's does not: get/get_sync with byte ranges inside the value,
set_sync/delete_sync, set_if_not_exists, getsize, list_prefix, list_dir, is_empty,
getsize_prefix and delete_dir on prefixes that include directory names cut short (which must
not match their longer siblings).

The default run is bounded to stay well under a minute; `-m slow` runs the long variant.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, note, settings
from hypothesis.stateful import precondition, rule, run_state_machine_as_test
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import cpu, default_buffer_prototype
from zarr.core.sync import sync
from zarr.testing.stateful import (
    MAX_BINARY_SIZE,
    SyncStoreWrapper,
    ZarrHierarchyStateMachine,
    ZarrStoreStateMachine,
)
from zarr.testing.strategies import keys as zarr_keys

from zarrdb import SQLiteStore

pytestmark = [
    # The hierarchy machine draws dtypes (fixed-length bytes/str, ...) that zarr flags as not
    # yet in the v3 spec; that warning is about zarr, not about the store.
    pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning"),
]

_COMMON = dict(
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
    report_multiple_bugs=False,
)

QUICK_STORE = settings(max_examples=60, stateful_step_count=40, **_COMMON)
QUICK_HIERARCHY = settings(max_examples=40, stateful_step_count=25, **_COMMON)
SLOW_STORE = settings(max_examples=300, stateful_step_count=60, **_COMMON)
SLOW_HIERARCHY = settings(max_examples=150, stateful_step_count=40, **_COMMON)


def _collect(aiter) -> list[str]:
    async def collect() -> list[str]:
        return [key async for key in aiter]

    return sync(collect())


def _async_list(store: SQLiteStore) -> list[str]:
    return _collect(store.list())


def _dir(prefix: str) -> str:
    """A directory prefix as the store API takes it, in the form "" or "a/b/"."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


def _store_machine(tmp_path: Path) -> type[ZarrStoreStateMachine]:
    counter = itertools.count()

    class SQLiteStoreStateMachine(ZarrStoreStateMachine):
        def __init__(self) -> None:
            self.path = tmp_path / f"store-{next(counter)}.zarrdb"
            super().__init__(SQLiteStore(self.path))

        @property
        def sqlite_store(self) -> SQLiteStore:
            return self.store.store

        @rule()
        def reopen_as_new_store(self) -> None:
            """Close the store and continue on a new SQLiteStore object for the same file."""
            self.sqlite_store.close()
            assert not self.sqlite_store._is_open
            self.store = SyncStoreWrapper(SQLiteStore(self.path))

        @rule()
        def close_and_continue(self) -> None:
            """Close the store; its next use reopens it by itself."""
            self.sqlite_store.close()
            assert not self.sqlite_store._is_open

        @rule()
        def read_only_view_matches_model(self) -> None:
            """A second, read-only store on the same file sees exactly the committed state."""
            ro = SQLiteStore(self.path, read_only=True)
            try:
                assert sorted(_async_list(ro)) == sorted(self.model)
                proto = default_buffer_prototype()
                for key, value in self.model.items():
                    got = sync(ro.get(key, prototype=proto))
                    assert got is not None, key
                    assert got.to_bytes() == value.to_bytes(), key
            finally:
                ro.close()

        # --- parts of the Store API zarr's machine does not drive (or not on every zarr) ----

        def _draw_key(self, data: st.DataObject) -> str:
            return data.draw(st.sampled_from(sorted(self.model)), label="stored key")

        def _draw_prefix(self, data: st.DataObject) -> str:
            """"" or an ancestor directory of a stored key (sometimes the key itself, or a
            directory name cut short, which must not match its longer siblings)."""
            if not self.model or data.draw(st.booleans(), label="unrelated prefix"):
                return data.draw(st.just("") | zarr_keys(max_num_nodes=3), label="prefix")
            parts = self._draw_key(data).split("/")
            n = data.draw(st.integers(0, len(parts)), label="depth")
            prefix = "/".join(parts[:n])
            if prefix and data.draw(st.booleans(), label="cut short"):
                prefix = prefix[: data.draw(st.integers(1, len(prefix)), label="cut")]
            return prefix

        def _under(self, prefix: str) -> list[str]:
            d = _dir(prefix)
            return sorted(k for k in self.model if k.startswith(d))

        @precondition(lambda self: bool(self.model))
        @rule(data=st.data())
        def get_byte_range(self, data: st.DataObject) -> None:
            """get and get_sync with a byte range drawn within (or just past) the value."""
            key = self._draw_key(data)
            value = self.model[key].to_bytes()
            n = len(value)
            bound = st.integers(0, n + 2)
            kind = data.draw(st.sampled_from(["range", "offset", "suffix"]), label="kind")
            if kind == "range":
                start = data.draw(bound, label="start")
                end = data.draw(st.integers(start, n + 2), label="end")
                request = RangeByteRequest(start, end)
                expected = value[start:end]
            elif kind == "offset":
                offset = data.draw(bound, label="offset")
                request = OffsetByteRequest(offset)
                expected = value[offset:]
            else:
                suffix = data.draw(bound, label="suffix")
                request = SuffixByteRequest(suffix)
                expected = value[max(0, n - suffix) :] if suffix else b""
            note(f"(get_byte_range) {key=} {request=}")
            proto = default_buffer_prototype()
            got = sync(self.sqlite_store.get(key, prototype=proto, byte_range=request))
            assert got is not None
            assert got.to_bytes() == expected
            got = self.sqlite_store.get_sync(key, prototype=proto, byte_range=request)
            assert got is not None
            assert got.to_bytes() == expected

        @rule(key=zarr_keys(), data=st.binary(min_size=0, max_size=MAX_BINARY_SIZE))
        def set_sync(self, key: str, data: bytes) -> None:
            note(f"(set_sync) {key=} {data=}")
            buf = cpu.Buffer.from_bytes(data)
            self.sqlite_store.set_sync(key, buf)
            self.model[key] = buf

        @precondition(lambda self: bool(self.model))
        @rule(data=st.data())
        def delete_sync(self, data: st.DataObject) -> None:
            key = self._draw_key(data)
            note(f"(delete_sync) {key=}")
            self.sqlite_store.delete_sync(key)
            del self.model[key]

        @rule(data=st.data(), value=st.binary(min_size=0, max_size=MAX_BINARY_SIZE))
        def set_if_not_exists(self, data: st.DataObject, value: bytes) -> None:
            if self.model and data.draw(st.booleans(), label="existing key"):
                key = self._draw_key(data)
            else:
                key = data.draw(zarr_keys(), label="key")
            note(f"(set_if_not_exists) {key=} {value=}")
            buf = cpu.Buffer.from_bytes(value)
            sync(self.sqlite_store.set_if_not_exists(key, buf))
            self.model.setdefault(key, buf)

        @precondition(lambda self: bool(self.model))
        @rule(data=st.data())
        def getsize(self, data: st.DataObject) -> None:
            key = self._draw_key(data)
            assert sync(self.sqlite_store.getsize(key)) == len(self.model[key])

        @rule(key=zarr_keys())
        def getsize_missing(self, key: str) -> None:
            if key not in self.model:
                with pytest.raises(FileNotFoundError):
                    sync(self.sqlite_store.getsize(key))

        @rule(data=st.data())
        def list_prefix(self, data: st.DataObject) -> None:
            prefix = self._draw_prefix(data)
            if prefix and data.draw(st.booleans(), label="as directory"):
                prefix += "/"
            note(f"(list_prefix) {prefix=}")
            expected = sorted(k for k in self.model if k.startswith(prefix))
            assert sorted(_collect(self.sqlite_store.list_prefix(prefix))) == expected

        @rule(data=st.data())
        def list_dir(self, data: st.DataObject) -> None:
            prefix = self._draw_prefix(data)
            d = _dir(prefix)
            note(f"(list_dir) {prefix=}")
            expected = sorted({k[len(d) :].split("/")[0] for k in self._under(prefix)})
            got = _collect(self.sqlite_store.list_dir(prefix))
            assert len(got) == len(set(got)), got
            assert sorted(got) == expected

        @rule(data=st.data())
        def is_empty_prefix(self, data: st.DataObject) -> None:
            prefix = self._draw_prefix(data)
            note(f"(is_empty) {prefix=}")
            assert sync(self.sqlite_store.is_empty(prefix)) == (not self._under(prefix))

        @rule(data=st.data())
        def getsize_prefix_any(self, data: st.DataObject) -> None:
            prefix = self._draw_prefix(data)
            note(f"(getsize_prefix) {prefix=}")
            expected = sum(len(self.model[k]) for k in self._under(prefix))
            assert sync(self.sqlite_store.getsize_prefix(prefix)) == expected

        @rule(data=st.data())
        def delete_dir(self, data: st.DataObject) -> None:
            prefix = self._draw_prefix(data)
            note(f"(delete_dir) {prefix=}")
            sync(self.sqlite_store.delete_dir(prefix))
            for key in self._under(prefix):
                del self.model[key]

        def teardown(self) -> None:
            self.sqlite_store.close()

    return SQLiteStoreStateMachine


def _hierarchy_machine(tmp_path: Path) -> type[ZarrHierarchyStateMachine]:
    counter = itertools.count()

    class SQLiteHierarchyStateMachine(ZarrHierarchyStateMachine):
        def __init__(self) -> None:
            self.path = tmp_path / f"hierarchy-{next(counter)}.zarrdb"
            super().__init__(SQLiteStore(self.path))

        @rule()
        def reopen_as_new_store(self) -> None:
            """Close the store and continue on a new SQLiteStore object for the same file."""
            self.store.close()
            self.store = SQLiteStore(self.path)

        @rule()
        def read_only_view_matches_model(self) -> None:
            """A second, read-only store on the same file lists the same keys as the model and
            returns the same bytes as the writable store."""
            ro = SQLiteStore(self.path, read_only=True)
            try:
                ro_keys = sorted(_async_list(ro))
                model_keys = sorted(self._sync_iter(self.model.list_prefix("")))
                assert ro_keys == model_keys
                proto = default_buffer_prototype()
                for key in ro_keys:
                    a = sync(ro.get(key, prototype=proto))
                    b = sync(self.store.get(key, prototype=proto))
                    assert a is not None and b is not None, key
                    assert a.to_bytes() == b.to_bytes(), key
            finally:
                ro.close()

        def teardown(self) -> None:
            self.store.close()

    return SQLiteHierarchyStateMachine


def test_store_state_machine(tmp_path: Path) -> None:
    machine = _store_machine(tmp_path)
    run_state_machine_as_test(machine, settings=QUICK_STORE)


def test_hierarchy_state_machine(tmp_path: Path) -> None:
    machine = _hierarchy_machine(tmp_path)
    run_state_machine_as_test(machine, settings=QUICK_HIERARCHY)


@pytest.mark.slow
def test_store_state_machine_long(tmp_path: Path) -> None:
    machine = _store_machine(tmp_path)
    run_state_machine_as_test(machine, settings=SLOW_STORE)


@pytest.mark.slow
def test_hierarchy_state_machine_long(tmp_path: Path) -> None:
    machine = _hierarchy_machine(tmp_path)
    run_state_machine_as_test(machine, settings=SLOW_HIERARCHY)
