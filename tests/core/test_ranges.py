"""Byte ranges: get_range and get_ranges (blob reads), clamped like zarr's byte requests:
RangeByteRequest(start, end) is (start, end - start), OffsetByteRequest(o) is (o, None),
SuffixByteRequest(n) is (-n, None)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zarrdb import errors

from . import writes
from .helpers import needs_test_hooks

VALUE = bytes(range(10))  # b"\x00\x01...\x09"


def reference_range(value: bytes, start: int, length: int | None) -> bytes:
    """The documented semantics, written out independently: [start, start+length) clamped to
    the value; a start past the end gives b""; start < 0 means the last -start bytes."""
    size = len(value)
    if start < 0:
        first = max(size + start, 0)
    else:
        first = min(start, size)
    last = size if length is None else min(first + length, size)
    return value[first:last]


@pytest.mark.parametrize(
    "start, length, expected",
    [
        (0, None, VALUE),
        (0, 10, VALUE),
        (0, 3, b"\x00\x01\x02"),
        (2, 3, b"\x02\x03\x04"),
        (9, 1, b"\x09"),
        (7, None, b"\x07\x08\x09"),  # OffsetByteRequest(7)
        (7, 100, b"\x07\x08\x09"),  # RangeByteRequest(7, 107): clamped to the end
        (0, 1_000_000, VALUE),
        (10, None, b""),  # start at the end
        (10, 5, b""),
        (11, 1, b""),  # start past the end
        (1 << 40, 1, b""),
        (1 << 40, None, b""),
        (3, 0, b""),  # zero length
        (0, 0, b""),
        (-3, None, b"\x07\x08\x09"),  # SuffixByteRequest(3)
        (-1, None, b"\x09"),
        (-10, None, VALUE),
        (-11, None, VALUE),  # suffix longer than the value: all of it
        (-(1 << 40), None, VALUE),
        (-4, 2, b"\x06\x07"),  # from 4 before the end, 2 bytes
        (-4, 10, b"\x06\x07\x08\x09"),
    ],
)
def test_get_range_table(any_db, start, length, expected):
    writes.set(any_db, "k", VALUE)
    assert any_db.get_range("k", start, length) == expected
    assert reference_range(VALUE, start, length) == expected  # the reference agrees


def test_get_range_missing_key_is_none(any_db):
    assert any_db.get_range("missing", 0, 5) is None
    assert any_db.get_range("missing", -2, None) is None
    assert any_db.get_range("missing", 100, 0) is None


def test_get_range_of_empty_value(any_db):
    writes.set(any_db, "e", b"")
    for start, length in [(0, None), (0, 5), (3, 1), (-2, None), (0, 0)]:
        assert any_db.get_range("e", start, length) == b""


def test_get_range_negative_length_is_refused(any_db):
    writes.set(any_db, "k", VALUE)
    with pytest.raises(ValueError):
        any_db.get_range("k", 0, -1)
    with pytest.raises(ValueError):
        any_db.get_ranges([("k", 0, 2), ("k", 1, -5)])
    assert any_db.get_range("k", 0, 2) == b"\x00\x01"


def test_get_range_returns_bytes(any_db):
    writes.set(any_db, "k", bytearray(VALUE))
    assert type(any_db.get_range("k", 1, 2)) is bytes
    assert type(any_db.get_range("k", 20, 2)) is bytes


def test_get_range_in_a_large_value_across_pages(any_db):
    rng = np.random.default_rng(7)
    value = rng.integers(0, 256, 1_500_000, dtype=np.uint8).tobytes()
    writes.set(any_db, "big", value)
    for start, length in [
        (0, 1),
        (4095, 2),
        (4096, 4096),
        (123_456, 654_321),
        (1_499_999, 10),
        (-70_000, None),
        (-1_500_000, None),
        (1_000_000, None),
        (0, None),
    ]:
        assert any_db.get_range("big", start, length) == reference_range(value, start, length)


def test_get_ranges_in_input_order(any_db):
    writes.set_many(any_db, [("a", b"abcdef"), ("b", b"0123456789"), ("e", b"")])
    requests = [
        ("b", 2, 3),
        ("missing", 0, None),
        ("a", -2, None),
        ("a", 0, None),
        ("e", 0, 4),
        ("b", 20, None),
        ("a", 1, 1),
        ("b", 2, 3),
    ]
    assert any_db.get_ranges(requests) == [
        b"234",
        None,
        b"ef",
        b"abcdef",
        b"",
        b"",
        b"b",
        b"234",
    ]


def test_get_ranges_empty_and_iterables(any_db):
    writes.set(any_db, "a", b"xyz")
    assert any_db.get_ranges([]) == []
    assert any_db.get_ranges(iter([("a", 1, None)])) == [b"yz"]
    assert any_db.get_ranges((("a", 0, 1),)) == [b"x"]


def test_get_ranges_many_keys(any_db):
    pairs = [(f"c/{i}", bytes([i % 251]) * (i % 300)) for i in range(2000)]
    writes.set_many(any_db, pairs)
    requests = [(k, i % 17, (i % 5) or None) for i, (k, _) in enumerate(pairs)]
    requests += [("c/none", 0, 1)]
    expected = [reference_range(v, i % 17, (i % 5) or None) for i, (_, v) in enumerate(pairs)]
    assert any_db.get_ranges(requests) == expected + [None]


@needs_test_hooks
def test_get_range_inside_a_write_transaction_sees_own_writes(any_db):
    writes.set(any_db, "k", b"old value")
    with writes.open_writer(any_db) as writer:
        token = writer.begin(0, [])
        writer.write([("set", "k", b"new value")])
        writer.write([("set", "n", b"fresh")])
        with writer.holding() as db:  # the connection reads inside a transaction use
            assert db.get_range("k", 0, 3) == b"new"
            assert db.get_ranges([("n", 1, None), ("k", -5, None)]) == [b"resh", b"value"]
        writer.end(token, True)
    assert any_db.get_range("k", 0, 3) == b"new"


def test_get_range_invalid_key(any_db):
    with pytest.raises(errors.InvalidKeyError):
        any_db.get_range("\ud800", 0, 1)
    with pytest.raises(errors.InvalidKeyError):
        any_db.get_ranges([("ok", 0, 1), ("\udfff", 0, 1)])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.binary(max_size=300),
    start=st.integers(-400, 400) | st.integers(-(1 << 62), 1 << 62),
    length=st.none() | st.integers(0, 400) | st.integers(0, 1 << 62),
)
def test_get_range_property(fast_db, value, start, length):
    writes.set(fast_db, "p", value)
    assert fast_db.get_range("p", start, length) == reference_range(value, start, length)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.dictionaries(
        st.sampled_from(["a", "b", "c/d", "é", "\U0001f600"]), st.binary(max_size=50)
    ),
    requests=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c/d", "é", "\U0001f600", "missing"]),
            st.integers(-60, 60),
            st.none() | st.integers(0, 60),
        ),
        max_size=20,
    ),
)
def test_get_ranges_property(fast_db, values, requests):
    writes.delete_prefix(fast_db, "")
    writes.set_many(fast_db, values.items())
    expected = [
        None if key not in values else reference_range(values[key], start, length)
        for key, start, length in requests
    ]
    assert fast_db.get_ranges(requests) == expected
    assert fast_db.get_many([key for key, _, _ in requests]) == [
        values.get(k) for k, _, _ in requests
    ]
