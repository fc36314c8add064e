"""Listings and aggregates over key ranges: list_keys, list_prefix, list_dir (skip-scan),
count_prefix, size_prefix, delete_prefix. Order is SQLite's BINARY order: UTF-8 bytes."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrdb import errors
from zarrdb._core import Database

from . import writes
from .helpers import make_db_file, needs_test_hooks, sqlite_rows, utf8_order

TRICKY = ["a/b", "a/b-c", "a/b/c", "a/b0", "a/b.c", "a/b/c/d", "a/ba", "a", "a-b", "a0", "b"]


def model_list_dir(keys, prefix):
    """Children of `prefix`, by the docstring: keys below it by their name relative to it,
    sub-trees as "name/"; sorted by UTF-8 bytes."""
    children = set()
    for key in keys:
        if key.startswith(prefix):
            rest = key[len(prefix) :]
            slash = rest.find("/")
            children.add(rest if slash < 0 else rest[: slash + 1])
    return utf8_order(children)


@pytest.fixture
def tricky_db(any_db):
    writes.set_many(any_db, [(k, k.encode()) for k in TRICKY])
    return any_db


def test_list_keys_binary_order(tricky_db):
    assert tricky_db.list_keys() == [
        "a",
        "a-b",
        "a/b",
        "a/b-c",
        "a/b.c",
        "a/b/c",
        "a/b/c/d",
        "a/b0",
        "a/ba",
        "a0",
        "b",
    ]


def test_list_prefix_tricky(tricky_db):
    assert tricky_db.list_prefix("a/b") == [
        "a/b",
        "a/b-c",
        "a/b.c",
        "a/b/c",
        "a/b/c/d",
        "a/b0",
        "a/ba",
    ]
    assert tricky_db.list_prefix("a/b/") == ["a/b/c", "a/b/c/d"]
    assert tricky_db.list_prefix("a/b/c") == ["a/b/c", "a/b/c/d"]
    assert tricky_db.list_prefix("a/") == [
        "a/b",
        "a/b-c",
        "a/b.c",
        "a/b/c",
        "a/b/c/d",
        "a/b0",
        "a/ba",
    ]
    assert tricky_db.list_prefix("a") == tricky_db.list_keys()[:-1]
    assert tricky_db.list_prefix("") == tricky_db.list_keys()
    assert tricky_db.list_prefix("c") == []
    assert tricky_db.list_prefix("a/b/c/d/") == []


def test_list_dir_tricky(tricky_db):
    assert tricky_db.list_dir("a/") == ["b", "b-c", "b.c", "b/", "b0", "ba"]
    assert tricky_db.list_dir("a/b/") == ["c", "c/"]
    assert tricky_db.list_dir("a/b/c/") == ["d"]
    assert tricky_db.list_dir("") == ["a", "a-b", "a/", "a0", "b"]
    assert tricky_db.list_dir("zzz/") == []
    assert tricky_db.list_dir("a/b/c/d/") == []


def test_list_dir_subtree_only(any_db):
    writes.set_many(any_db, [("g/x/1", b""), ("g/x/2", b""), ("g/y/z/3", b"")])
    assert any_db.list_dir("") == ["g/"]
    assert any_db.list_dir("g/") == ["x/", "y/"]
    assert any_db.list_dir("g/y/") == ["z/"]


def test_list_dir_needs_a_directory_prefix(tricky_db):
    for bad in ("a", "a/b", "a/b-"):
        with pytest.raises(errors.InvalidKeyError):
            tricky_db.list_dir(bad)
    assert tricky_db.list_dir("a/")  # still usable


def test_count_and_size_prefix(any_db):
    values = {"a/b": b"1", "a/b-c": b"22", "a/b/c": b"333", "a/b0": b"4444", "b": b"55555"}
    writes.set_many(any_db, values.items())
    assert any_db.count_prefix("") == 5
    assert any_db.size_prefix("") == 15
    assert any_db.count_prefix("a/b") == 4
    assert any_db.size_prefix("a/b") == 10
    assert any_db.count_prefix("a/b/") == 1
    assert any_db.size_prefix("a/b/") == 3
    assert any_db.count_prefix("a/b0") == 1
    assert any_db.count_prefix("nothing") == 0
    assert any_db.size_prefix("nothing") == 0
    writes.set(any_db, "empty", b"")
    assert any_db.count_prefix("e") == 1
    assert any_db.size_prefix("e") == 0


def test_empty_database_listings(any_db):
    assert any_db.list_keys() == []
    assert any_db.list_prefix("") == []
    assert any_db.list_prefix("a") == []
    assert any_db.list_dir("") == []
    assert any_db.count_prefix("") == 0
    assert any_db.size_prefix("") == 0


UNICODE_KEYS = [
    "\x00",
    "\x7f",
    "\x80",
    "z",
    "é",  # U+00E9, 2 bytes
    "e\u0301",  # the same text in NFD: another key
    "\u07ff",
    "\u0800",
    "\ud7ff",
    "\ue000",  # private use: after the surrogate block in UTF-8, before it in UTF-16
    "\uffff",
    "\U00010000",  # 4 bytes in UTF-8; a surrogate pair (D800 DC00) in UTF-16
    "\U0001f600",
    "\U0010ffff",
]


def test_unicode_order_is_utf8_byte_order(any_db):
    writes.set_many(any_db, [(k, k.encode("utf-8")) for k in reversed(UNICODE_KEYS)])
    expected = [
        "\x00",
        "e\u0301",
        "z",
        "\x7f",
        "\x80",
        "é",
        "\u07ff",
        "\u0800",
        "\ud7ff",
        "\ue000",
        "\uffff",
        "\U00010000",
        "\U0001f600",
        "\U0010ffff",
    ]
    assert any_db.list_keys() == expected
    assert expected == utf8_order(UNICODE_KEYS)
    # The order SQLite reports for the same keys, in another process (stdlib sqlite3).
    assert [r[0] for r in sqlite_rows(any_db.path, "SELECT k FROM zarr ORDER BY k")] == expected


def test_astral_keys_sort_after_the_private_use_area(any_db):
    # In UTF-16 order U+10000 (D800 DC00) would come before U+E000 and U+FFFF.
    writes.set_many(any_db, [("\U00010000", b"1"), ("\ue000", b"2"), ("\uffff", b"3")])
    assert any_db.list_keys() == ["\ue000", "\uffff", "\U00010000"]
    assert any_db.list_dir("") == ["\ue000", "\uffff", "\U00010000"]


@pytest.mark.parametrize(
    "prefix, expected",
    [
        ("é", ["é", "é/1", "éa"]),
        ("e", ["ez", "e\u0301", "e\u0301/x"]),
        ("e\u0301", ["e\u0301", "e\u0301/x"]),
        ("\U0001f600", ["\U0001f600", "\U0001f600/\U0001f601", "\U0001f600\U0010ffff"]),
        ("\U0001f600/", ["\U0001f600/\U0001f601"]),
        ("\U0010ffff", ["\U0010ffff", "\U0010ffff\U0010ffff"]),
        ("\x7f", ["\x7f", "\x7f\x7f"]),
        ("\uffff", ["\uffff"]),
        ("a\x00", ["a\x00", "a\x00/b", "a\x00b"]),
        ("a\x00/", ["a\x00/b"]),
    ],
)
def test_list_prefix_unicode_boundaries(any_db, prefix, expected):
    keys = [
        "é", "é/1", "éa", "ê", "e\u0301", "e\u0301/x", "ez", "f",
        "\U0001F600", "\U0001F600/\U0001F601", "\U0001F600\U0010FFFF", "\U0001F601",
        "\U0010FFFF", "\U0010FFFF\U0010FFFF",
        "\x7f", "\x7f\x7f", "\x80",
        "\uffff", "\U00010000",
        "a", "a\x00", "a\x00/b", "a\x00b", "a\x01",
    ]  # fmt: skip
    writes.set_many(any_db, [(k, b"x" * len(k)) for k in keys])
    assert any_db.list_prefix(prefix) == expected
    assert any_db.count_prefix(prefix) == len(expected)
    assert any_db.size_prefix(prefix) == sum(len(k) for k in expected)


def test_list_dir_unicode(any_db):
    keys = [
        "d/é/1",
        "d/é",
        "d/e\u0301/2",
        "d/\U0001f600/x/y",
        "d/\U0001f600",
        "d/\uffff/z",
        "d/\x00",
    ]
    writes.set_many(any_db, [(k, b"") for k in keys])
    assert any_db.list_dir("d/") == [
        "\x00",
        "e\u0301/",
        "é",
        "é/",
        "\uffff/",
        "\U0001f600",
        "\U0001f600/",
    ]
    assert any_db.list_dir("d/\U0001f600/") == ["x/"]
    assert any_db.list_dir("d/\U0001f600/x/") == ["y"]


def test_list_dir_long_names_and_deep_prefix(any_db):
    # Names longer than any fixed cursor buffer, under a long prefix.
    prefix = "p" * 300 + "/" + "q" * 700 + "/"
    names = ["n" * 5000, "m" * 257, "o" * 10_000 + "/deeper/still", "x"]
    writes.set_many(any_db, [(prefix + n, b"v") for n in names])
    writes.set(any_db, "p" * 300 + "/z", b"v")
    assert any_db.list_dir(prefix) == ["m" * 257, "n" * 5000, "o" * 10_000 + "/", "x"]
    assert any_db.list_dir("p" * 300 + "/") == ["q" * 700 + "/", "z"]
    assert any_db.list_dir("") == ["p" * 300 + "/"]


def test_list_dir_many_children(any_db):
    pairs = []
    for i in range(500):
        pairs.append((f"root/c{i:04d}/zarr.json", b"{}"))
        pairs.append((f"root/c{i:04d}/c/0/0", b"x"))
        if i % 3 == 0:
            pairs.append((f"root/k{i:04d}", b"y"))
    writes.set_many(any_db, pairs)
    expected = utf8_order(
        [f"c{i:04d}/" for i in range(500)] + [f"k{i:04d}" for i in range(0, 500, 3)]
    )
    assert any_db.list_dir("root/") == expected
    assert any_db.list_dir("root/c0042/") == ["c/", "zarr.json"]


def test_list_dir_skips_subtrees(tmp_path):
    # A group with a few children, one of which holds very many chunks: listing the group
    # must not read every chunk key. The populated file is built with stdlib sqlite3.
    chunks = 200_000
    rows = [(f"g/big/c/{i}", b"") for i in range(chunks)]
    rows += [("g/zarr.json", b"{}"), ("g/small/zarr.json", b"{}"), ("g/big/zarr.json", b"{}")]
    path = make_db_file(tmp_path / "skip.zarrdb", rows=rows)
    with Database(path) as db:
        assert db.list_dir("g/") == ["big/", "small/", "zarr.json"]

        def best_of(fn, n=5):
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return min(times)

        t_dir = best_of(lambda: db.list_dir("g/"))
        t_count = best_of(lambda: db.count_prefix("g/big/c/"), 3)
        # Reading every chunk key once (count) is far slower than a few index seeks.
        assert t_dir * 20 < t_count, (t_dir, t_count)


def test_delete_prefix_leaves_neighbours(tricky_db):
    assert writes.delete_prefix(tricky_db, "a/b/") == 2
    assert tricky_db.list_keys() == ["a", "a-b", "a/b", "a/b-c", "a/b.c", "a/b0", "a/ba", "a0", "b"]
    assert writes.delete_prefix(tricky_db, "a/b") == 5
    assert tricky_db.list_keys() == ["a", "a-b", "a0", "b"]


@pytest.mark.parametrize("prefix", ["é", "\U0001f600", "\U0010ffff", "\x7f", "a\x00"])
def test_delete_prefix_unicode_boundaries(any_db, prefix):
    keys = ["é", "é/1", "ê", "\U0001F600", "\U0001F600x", "\U0001F601", "\U0010FFFF",
            "\U0010FFFF\x00", "\x7f", "\x7f/", "\x80",
            "a", "a\x00", "a\x00\x00", "a\x01"]  # fmt: skip
    writes.set_many(any_db, [(k, b"") for k in keys])
    gone = [k for k in keys if k.startswith(prefix)]
    assert writes.delete_prefix(any_db, prefix) == len(gone)
    assert any_db.list_keys() == utf8_order(set(keys) - set(gone))


# --- property test against a model --------------------------------------------------------

_segment = st.text(
    alphabet=st.sampled_from(["a", "b", "-", ".", "0", "é", "\U0001f600", "\x00"]),
    min_size=1,
    max_size=3,
)
_zarr_key = st.lists(_segment, min_size=1, max_size=4).map("/".join)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.sets(_zarr_key | st.text(max_size=6), max_size=40),
    prefix_parts=st.lists(_segment, max_size=3),
    raw_prefix=st.text(max_size=3),
)
def test_listings_match_a_model(fast_db, keys, prefix_parts, raw_prefix):
    writes.delete_prefix(fast_db, "")
    values = {k: k.encode("utf-8") * 2 for k in keys}
    writes.set_many(fast_db, values.items())
    dir_prefix = "".join(p + "/" for p in prefix_parts)
    assert fast_db.list_keys() == utf8_order(keys)
    for prefix in (dir_prefix, raw_prefix, dir_prefix + raw_prefix):
        selected = [k for k in keys if k.startswith(prefix)]
        assert fast_db.list_prefix(prefix) == utf8_order(selected)
        assert fast_db.count_prefix(prefix) == len(selected)
        assert fast_db.size_prefix(prefix) == sum(len(values[k]) for k in selected)
    assert fast_db.list_dir(dir_prefix) == model_list_dir(keys, dir_prefix)


# --- has_prefix, list_prefix_sizes, rename_prefix ---------------------------------------------

needs_rename = pytest.mark.skipif(
    not hasattr(Database, "rename_prefix"), reason="the built engine predates rename_prefix"
)
needs_sizes = pytest.mark.skipif(
    not hasattr(Database, "list_prefix_sizes"),
    reason="the built engine predates list_prefix_sizes",
)


def test_has_prefix(tricky_db):
    assert tricky_db.has_prefix("")
    assert tricky_db.has_prefix("a/b/")
    assert tricky_db.has_prefix("a/b/c/d")
    assert tricky_db.has_prefix("a/b")
    assert not tricky_db.has_prefix("a/b/c/d/")
    assert not tricky_db.has_prefix("a/c")
    assert not tricky_db.has_prefix("c")
    assert not tricky_db.has_prefix("a/b/d")


def test_has_prefix_empty_database_and_unicode(any_db):
    assert not any_db.has_prefix("")
    writes.set_many(any_db, [("é/\U0001f600", b""), ("a\x00b", b"")])
    assert any_db.has_prefix("é/")
    assert any_db.has_prefix("é/\U0001f600")
    assert not any_db.has_prefix("e\u0301")  # NFD is another prefix
    assert any_db.has_prefix("a\x00")
    assert not any_db.has_prefix("a\x00c")
    assert not any_db.has_prefix("a/")


@needs_sizes
def test_list_prefix_sizes(any_db):
    values = {
        "a/b": b"1",
        "a/b-c": b"22",
        "a/b/c": b"333",
        "a/b0": b"",
        "b": b"55555",
        "a\x00": b"x",
    }
    values["é/\U0001f600"] = bytes(70_000)
    writes.set_many(any_db, values.items())
    expected_all = [(k, len(values[k])) for k in utf8_order(values)]
    assert any_db.list_prefix_sizes("") == expected_all
    assert any_db.list_prefix_sizes("a/b") == [("a/b", 1), ("a/b-c", 2), ("a/b/c", 3), ("a/b0", 0)]
    assert any_db.list_prefix_sizes("a/b/") == [("a/b/c", 3)]
    assert any_db.list_prefix_sizes("é") == [("é/\U0001f600", 70_000)]
    assert any_db.list_prefix_sizes("a\x00") == [("a\x00", 1)]
    assert any_db.list_prefix_sizes("zzz") == []


@needs_rename
def test_rename_prefix(any_db):
    keys = {"a/b": b"1", "a/b-c": b"2", "a/b/c": b"3", "a/b/d/e": b"4", "a/b0": b"5", "b": b"6"}
    writes.set_many(any_db, keys.items())
    assert any_db.rename_prefix("a/b/", "x/y/") == 2
    assert any_db.get_many(["x/y/c", "x/y/d/e"]) == [b"3", b"4"]
    assert any_db.list_keys() == ["a/b", "a/b-c", "a/b0", "b", "x/y/c", "x/y/d/e"]
    assert any_db.rename_prefix("nothing/", "else/") == 0
    assert not any_db.in_transaction


@needs_rename
@pytest.mark.parametrize(
    "old, new",
    [("é/", "\U0001f600/"), ("\U0001f600/", "e\u0301/"), ("g/", "g\U0010ffff/"), ("g/", "")],
)
def test_rename_prefix_unicode(any_db, old, new):
    names = ["1", "é", "\U0001f601/z", "\uffff"]
    writes.set_many(any_db, [(old + n, n.encode()) for n in names] + [("other", b"o")])
    assert any_db.rename_prefix(old, new) == len(names)
    assert any_db.list_keys() == utf8_order([new + n for n in names] + ["other"])
    for n in names:
        assert any_db.get(new + n) == n.encode()
    stored = sorted(r[0] for r in sqlite_rows(any_db.path, "SELECT hex(k) FROM zarr"))
    expected = sorted((new + n).encode().hex().upper() for n in names) + ["6F74686572"]
    assert stored == sorted(expected)


@needs_rename
def test_rename_prefix_keeps_embedded_nul(any_db):
    # Keys are kept exactly, NUL included, when they move.
    writes.set_many(any_db, [("a/x\x00y", b"1"), ("a/\x00", b"2"), ("a\x00/q\x00r", b"3")])
    assert any_db.rename_prefix("a/", "c/") == 2
    assert any_db.rename_prefix("a\x00/", "d\x00/") == 1
    assert any_db.list_keys() == ["c/\x00", "c/x\x00y", "d\x00/q\x00r"]
    assert any_db.get_many(["c/x\x00y", "c/\x00", "d\x00/q\x00r"]) == [b"1", b"2", b"3"]


@needs_rename
def test_rename_prefix_conflict_moves_nothing(any_db):
    writes.set_many(any_db, [("e/1", b"1"), ("e/2", b"2"), ("f/2", b"existing")])
    with pytest.raises(errors.ConstraintError):
        any_db.rename_prefix("e/", "f/")
    assert not any_db.in_transaction
    assert any_db.list_keys() == ["e/1", "e/2", "f/2"]
    assert any_db.get("f/2") == b"existing"


@needs_test_hooks
@needs_rename
def test_rename_prefix_inside_a_transaction(any_db):
    writes.set_many(any_db, [("e/1", b"1"), ("e/2", b"2")])
    # As SQLiteStore.rename runs inside an explicit transaction: on the connection the writer
    # hands over, as part of the transaction, which then rolls back.
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        with writer.holding() as db:
            assert db.rename_prefix("e/", "f/") == 2
            assert db.list_keys() == ["f/1", "f/2"]
        writer.end(token, False)
    assert any_db.list_keys() == ["e/1", "e/2"]


@needs_rename
def test_rename_prefix_refuses_the_empty_prefix(any_db):
    writes.set(any_db, "k", b"v")
    with pytest.raises(errors.InvalidKeyError):
        any_db.rename_prefix("", "x/")
    assert any_db.list_keys() == ["k"]
