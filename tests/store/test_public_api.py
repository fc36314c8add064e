"""The store's own public methods beyond zarr's Store API (used by the command line)."""

import asyncio
import sqlite3

import pytest
from zarr.core.buffer import cpu

from zarrdb import SQLiteStore, errors


def test_ensure_open_creates_the_file_and_raises_for_a_foreign_one(tmp_path):
    path = tmp_path / "a.zarrdb"
    store = SQLiteStore(path)
    assert not path.exists()
    store.ensure_open()
    assert path.exists()
    store.ensure_open()  # idempotent
    store.close()

    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE t(x)")
    con.close()
    with pytest.raises(errors.NotAZarrDBError):
        SQLiteStore(foreign, read_only=True).ensure_open()


def test_options_are_a_copy_of_what_was_asked(tmp_path):
    store = SQLiteStore(tmp_path / "a.zarrdb", durability="off", busy_timeout=2)
    opts = store.options
    assert opts["durability"] == "off" and opts["busy_timeout"] == 2.0
    opts["durability"] = "full"
    assert store.options["durability"] == "off"


def test_set_many_commits_every_pair(tmp_path):
    path = tmp_path / "a.zarrdb"
    with SQLiteStore(path) as store:
        pairs = [(f"k/{i}", cpu.Buffer.from_bytes(bytes([i]) * 10)) for i in range(20)]
        asyncio.run(store.set_many(pairs))
    con = sqlite3.connect(path)
    rows = dict(con.execute("SELECT k, v FROM zarr WHERE k LIKE 'k/%'"))
    con.close()
    assert rows == {f"k/{i}": bytes([i]) * 10 for i in range(20)}


def test_rename_and_the_deprecated_move(tmp_path):
    path = tmp_path / "a.zarrdb"
    with SQLiteStore(path) as store:
        asyncio.run(store.set("a/zarr.json", cpu.Buffer.from_bytes(b"{}")))
        assert store.rename("a", "b") == 1
        with pytest.warns(DeprecationWarning, match="rename"):
            assert store.move("b", "c") == 1
        assert asyncio.run(store.exists("c/zarr.json"))
        assert not asyncio.run(store.exists("a/zarr.json"))
