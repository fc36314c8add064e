"""Keys: Python str stored as their exact UTF-8 bytes (checked with the standard-library sqlite3
in another process), no Unicode normalisation, BINARY comparison, embedded NUL kept, lone
surrogates refused with InvalidKeyError; values stored with SQLite type BLOB."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrdb import errors
from zarrdb._core import Database

from . import writes
from .helpers import make_db_file, needs_test_hooks, sqlite_rows, utf8_order

KEYS = [
    "",
    "zarr.json",
    "group/array/c/0/0/1",
    "a\x00b",
    "a\x00",
    "\x00",
    "\x01\x1f\x7f",
    "tab\tnew\nline",
    "\u00e9",  # é in NFC
    "e\u0301",  # NFD of the same text
    "\u00c5",  # LATIN CAPITAL LETTER A WITH RING ABOVE
    "\u212b",  # ANGSTROM SIGN (NFC maps it to U+00C5)
    "\ufb01",  # LATIN SMALL LIGATURE FI (NFKC: "fi")
    "fi",
    "日本語/キー",
    "\u200b",
    "\ufeff",
    "\uffff",
    "\U00010000",
    "\U0001f600/\U0001f601",
    "\U0010ffff",
    "A",
    "a",
    " ",
    "/",
    "a//b/",
]


def test_stored_key_bytes_are_the_exact_utf8(db):
    writes.set_many(db, [(k, k.encode("utf-8") + b"!") for k in KEYS])
    rows = sqlite_rows(db.path, "SELECT hex(k), typeof(k), typeof(v), hex(v) FROM zarr")
    assert sorted(r[0] for r in rows) == sorted(k.encode("utf-8").hex().upper() for k in KEYS)
    for hex_key, key_type, value_type, hex_value in rows:
        assert key_type == "text"
        assert value_type == "blob"
        assert hex_value == hex_key + "21"  # the value is the key's UTF-8 plus "!"


def test_each_key_reads_back_exactly(any_db):
    writes.set_many(any_db, [(k, k.encode("utf-8")) for k in KEYS])
    assert any_db.count_prefix("") == len(KEYS)
    for k in KEYS:
        assert any_db.get(k) == k.encode("utf-8")
        assert any_db.exists(k)
        assert any_db.length(k) == len(k.encode("utf-8"))
    assert any_db.get_many(KEYS) == [k.encode("utf-8") for k in KEYS]
    assert any_db.list_keys() == utf8_order(KEYS)


def test_no_unicode_normalisation(any_db):
    nfc = unicodedata.normalize("NFC", "café/ﬁle")
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfc != nfd
    writes.set(any_db, nfc, b"nfc")
    assert any_db.get(nfd) is None
    assert not any_db.exists(nfd)
    writes.set(any_db, nfd, b"nfd")
    assert any_db.get(nfc) == b"nfc"
    assert any_db.get(nfd) == b"nfd"
    assert sorted(any_db.list_keys()) == sorted([nfc, nfd])
    assert writes.delete(any_db, nfd) is True
    assert any_db.list_keys() == [nfc]
    rows = sqlite_rows(any_db.path, "SELECT hex(k) FROM zarr")
    assert rows == [(nfc.encode("utf-8").hex().upper(),)]


def test_binary_collation_is_case_sensitive(any_db):
    writes.set_many(any_db, [("a", b"lower"), ("A", b"upper"), ("ä", b"umlaut")])
    assert any_db.get("a") == b"lower"
    assert any_db.get("A") == b"upper"
    assert any_db.list_keys() == ["A", "a", "ä"]
    assert any_db.list_prefix("a") == ["a"]
    assert any_db.count_prefix("A") == 1


def test_embedded_nul(any_db):
    writes.set_many(any_db, [("a", b"1"), ("a\x00", b"2"), ("a\x00b", b"3"), ("a\x00\x00", b"4")])
    assert any_db.get("a") == b"1"
    assert any_db.get("a\x00") == b"2"
    assert any_db.get("a\x00b") == b"3"
    assert any_db.get("a\x00\x00") == b"4"
    assert any_db.get("a\x00c") is None
    assert any_db.length("a\x00b") == 1
    assert any_db.list_keys() == ["a", "a\x00", "a\x00\x00", "a\x00b"]
    assert any_db.list_prefix("a\x00") == ["a\x00", "a\x00\x00", "a\x00b"]
    assert any_db.get_range("a\x00b", 0, None) == b"3"
    assert writes.set_if_absent(any_db, "a\x00b", b"x") is False
    assert writes.delete(any_db, "a\x00") is True
    assert any_db.list_keys() == ["a", "a\x00\x00", "a\x00b"]
    assert sorted(r[0] for r in sqlite_rows(any_db.path, "SELECT hex(k) FROM zarr")) == [
        "61",
        "610000",
        "610062",
    ]


def test_keys_written_by_another_program(tmp_path):
    rows = [(k, k.encode("utf-8")) for k in KEYS]
    path = make_db_file(tmp_path / "foreign.zarrdb", rows=rows)
    with Database(path) as db:
        for k in KEYS:
            assert db.get(k) == k.encode("utf-8")
        assert db.list_keys() == utf8_order(KEYS)


LONE_SURROGATES = ["\ud800", "a\udfff", "\udc80/b", "x\ud83d"]  # last: half of a pair

KEY_CALLS = [
    ("get", lambda db, k: db.get(k)),
    ("get_into", lambda db, k: db.get_into(k, bytearray(8))),
    ("get_range", lambda db, k: db.get_range(k, 0, 1)),
    ("get_many", lambda db, k: db.get_many(["ok", k])),
    ("get_ranges", lambda db, k: db.get_ranges([("ok", 0, 1), (k, 0, None)])),
    ("exists", lambda db, k: db.exists(k)),
    ("length", lambda db, k: db.length(k)),
    ("set", lambda db, k: writes.set(db, k, b"v")),
    ("set_if_absent", lambda db, k: writes.set_if_absent(db, k, b"v")),
    ("set_many", lambda db, k: writes.set_many(db, [("ok", b"new"), (k, b"v")])),
    ("delete", lambda db, k: writes.delete(db, k)),
    ("delete_many", lambda db, k: writes.delete_many(db, ["ok", k])),
]


@pytest.mark.parametrize("key", LONE_SURROGATES, ids=[ascii(k) for k in LONE_SURROGATES])
@pytest.mark.parametrize(
    "name, call",
    [
        pytest.param(name, call, id=name, marks=needs_test_hooks if name == "get_into" else ())
        for name, call in KEY_CALLS
    ],
)
def test_lone_surrogate_key_is_invalid(db, key, name, call):
    writes.set(db, "ok", b"old")
    with pytest.raises(errors.InvalidKeyError) as info:
        call(db, key)
    assert isinstance(info.value, ValueError)
    assert not db.in_transaction
    assert db.list_keys() == ["ok"]
    assert db.get("ok") == b"old"


PREFIX_CALLS = [
    ("list_prefix", lambda db, p: db.list_prefix(p)),
    ("list_dir", lambda db, p: db.list_dir(p + "/")),
    ("count_prefix", lambda db, p: db.count_prefix(p)),
    ("size_prefix", lambda db, p: db.size_prefix(p)),
    ("delete_prefix", lambda db, p: writes.delete_prefix(db, p)),
    ("has_prefix", lambda db, p: db.has_prefix(p)),
]


@pytest.mark.parametrize("name, call", PREFIX_CALLS, ids=[c[0] for c in PREFIX_CALLS])
def test_lone_surrogate_prefix_is_invalid(db, name, call):
    # A prefix is a key fragment: refused with the same InvalidKeyError as a key.
    writes.set(db, "ok", b"old")
    with pytest.raises(errors.InvalidKeyError):
        call(db, "\ud800")
    assert db.list_keys() == ["ok"]


@pytest.mark.parametrize("name, call", PREFIX_CALLS, ids=[c[0] for c in PREFIX_CALLS])
@pytest.mark.parametrize("bad", [b"a/", 1, None], ids=["bytes", "int", "None"])
def test_prefix_must_be_str(db, name, call, bad):
    # Like keys: a TypeError, whatever the call.
    writes.set(db, "ok", b"old")
    with pytest.raises(TypeError):
        call(db, bad) if name != "list_dir" else db.list_dir(bad)
    assert db.list_keys() == ["ok"]


def test_surrogate_pair_written_as_one_astral_character_is_fine(any_db):
    key = "\U0001f600"
    assert len(key) == 1
    writes.set(any_db, key, b"v")
    assert sqlite_rows(any_db.path, "SELECT hex(k) FROM zarr") == [("F09F9880",)]


def test_stored_key_that_is_not_utf8(tmp_path):
    # Written by another program: the bytes FF 61 cast to TEXT are not UTF-8.
    path = make_db_file(tmp_path / "bad-key.zarrdb", rows=[("good", b"1")])
    sqlite_rows(
        path, "INSERT INTO zarr(k, v) VALUES (CAST(x'ff61' AS TEXT), x'00')", readonly=False
    )
    with Database(path) as db:
        with pytest.raises(errors.InvalidKeyError):
            db.list_keys()
        with pytest.raises(errors.InvalidKeyError):
            db.list_dir("")
        # the connection is still fine afterwards
        assert db.get("good") == b"1"
        assert db.list_prefix("g") == ["good"]
        assert db.count_prefix("") == 2


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(keys=st.sets(st.text(max_size=12), min_size=1, max_size=30))
def test_any_text_key_roundtrips_as_utf8(fast_db, keys):
    writes.delete_prefix(fast_db, "")
    writes.set_many(fast_db, [(k, k.encode("utf-8")) for k in keys])
    assert fast_db.list_keys() == utf8_order(keys)
    assert fast_db.get_many(sorted(keys)) == [k.encode("utf-8") for k in sorted(keys)]
    rows = sqlite_rows(fast_db.path, "SELECT hex(k), typeof(v) FROM zarr")
    assert sorted(rows) == sorted((k.encode("utf-8").hex().upper(), "blob") for k in keys)
