"""A hypothesis state machine: the engine against a plain dict, over zarr-like and arbitrary
Unicode keys, through every read, write (the writer thread's, as SQLiteStore writes), listing and
explicit transaction operation."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from zarrdb._core import Database, Writer

from .helpers import make_db_file, needs_test_hooks, utf8_order

# Zarr-like keys from a small alphabet (so that prefixes, siblings and sub-trees collide),
# including the awkward neighbours of "/" in byte order ("-", ".", "0") and non-ASCII.
_segment = st.text(
    alphabet=st.sampled_from(["a", "b", "-", ".", "0", "c", "é", "\U0001f600", "\ufffd"]),
    min_size=1,
    max_size=3,
)
zarr_keys = st.lists(_segment, min_size=1, max_size=4).map("/".join)
tricky_keys = st.sampled_from(
    ["", "a", "a/b", "a/b-c", "a/b/c", "a/b0", "a/b/", "é", "e\u0301", "a\x00", "a\x00b",
     "\uffff", "\U00010000", "\ue000", "zarr.json", "a/zarr.json"]
)  # fmt: skip
keys = st.one_of(zarr_keys, tricky_keys, st.text(max_size=5))
values = st.binary(max_size=40)
dir_prefixes = st.one_of(
    st.just(""),
    st.lists(_segment, min_size=1, max_size=2).map(lambda parts: "/".join(parts) + "/"),
    st.sampled_from(["a/", "a/b/", "é/", "\U0001f600/"]),
)
prefixes = st.one_of(dir_prefixes, keys, st.text(max_size=2))


class Ops:
    """Operations applied to both the engine (through its writer thread) and the model (dict).
    Inside an explicit transaction a write is not waited for (it is the transaction's), so
    what it changed is not known to check."""

    @staticmethod
    def apply(writer: Writer, model: dict, op) -> None:
        kind = op[0]
        if kind == "set":
            _, k, v = op
            _write(writer, [("set", k, v)])
            model[k] = v
        elif kind == "set_many":
            _, pairs = op
            if pairs:
                _write(writer, [("set", k, v) for k, v in pairs])
            model.update(pairs)
        elif kind == "delete":
            _, k = op
            assert _write(writer, [("delete", k, None)]) in (None, int(k in model))
            model.pop(k, None)
        elif kind == "delete_prefix":
            _, p = op
            gone = [k for k in model if k.startswith(p)]
            assert _write(writer, [("delete_prefix", p, None)]) in (None, len(gone))
            for k in gone:
                del model[k]
        else:  # pragma: no cover
            raise AssertionError(op)


def _write(writer: Writer, ops) -> int | None:
    """The rows the submission changed, or None if it joined the open transaction."""
    sub = writer.submit(ops)
    if sub.joined:
        return None
    sub.wait()
    return sub.changes


write_ops = st.one_of(
    st.tuples(st.just("set"), keys, values),
    st.tuples(st.just("set_many"), st.lists(st.tuples(keys, values), max_size=4)),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("delete_prefix"), prefixes),
)


class Rollback(Exception):
    pass


class DatabaseMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="zarrdb-stateful-"))
        path = make_db_file(self.dir / "state.zarrdb", "wal")
        self.database = Database(path, synchronous="off")
        self.writer = Writer(self.database)
        self.model: dict[str, bytes] = {}
        self.saved: dict[str, bytes] | None = None  # committed state while begin() is open
        self.token = 0

    def teardown(self):
        try:
            if self.saved is not None:
                self.writer.end(self.token, False)
            self.writer.close()
            assert self.database.integrity_check() == []
        finally:
            self.writer.close()
            self.database.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def reading(self):
        """The connection, handed over by the writer once what is queued is written."""
        return self.writer.holding()

    # --- writes ------------------------------------------------------------------------

    @rule(k=keys, v=values)
    def set(self, k, v):
        Ops.apply(self.writer, self.model, ("set", k, v))

    @rule(pairs=st.lists(st.tuples(keys, values), max_size=6))
    def set_many(self, pairs):
        Ops.apply(self.writer, self.model, ("set_many", pairs))

    @rule(k=keys, v=values)
    def set_if_absent(self, k, v):
        written = _write(self.writer, [("set_if_absent", k, v)])
        assert written in (None, int(k not in self.model))
        self.model.setdefault(k, v)

    @rule(k=keys)
    def delete(self, k):
        Ops.apply(self.writer, self.model, ("delete", k))

    @rule(ks=st.lists(keys, max_size=5))
    def delete_many(self, ks):
        present = {k for k in ks if k in self.model}
        if ks:
            assert _write(self.writer, [("delete", k, None) for k in ks]) in (None, len(present))
        for k in present:
            del self.model[k]

    @rule(p=prefixes)
    def delete_prefix(self, p):
        Ops.apply(self.writer, self.model, ("delete_prefix", p))

    # --- reads ------------------------------------------------------------------------

    @rule(k=keys)
    def get(self, k):
        expected_length = len(self.model[k]) if k in self.model else None
        with self.reading() as db:
            assert db.get(k) == self.model.get(k)
            assert db.exists(k) is (k in self.model)
            assert db.length(k) == expected_length

    @rule(ks=st.lists(keys, max_size=8))
    def get_many(self, ks):
        with self.reading() as db:
            assert db.get_many(ks) == [self.model.get(k) for k in ks]

    @rule(k=keys, start=st.integers(-50, 50), length=st.none() | st.integers(0, 50))
    def get_range(self, k, start, length):
        with self.reading() as db:
            result = db.get_range(k, start, length)
        if k not in self.model:
            assert result is None
            return
        v = self.model[k]
        first = max(len(v) + start, 0) if start < 0 else min(start, len(v))
        last = len(v) if length is None else min(first + length, len(v))
        assert result == v[first:last]

    @rule(data=st.data())
    def get_ranges(self, data):
        pool = list(self.model) + ["missing"]
        requests = data.draw(
            st.lists(
                st.tuples(st.sampled_from(pool), st.integers(0, 45), st.integers(0, 10)),
                max_size=6,
            )
        )
        expected = [self.model[k][s : s + n] if k in self.model else None for k, s, n in requests]
        with self.reading() as db:
            assert db.get_ranges(requests) == expected

    @rule(p=prefixes)
    def list_prefix(self, p):
        selected = [k for k in self.model if k.startswith(p)]
        with self.reading() as db:
            assert db.list_prefix(p) == utf8_order(selected)
            assert db.count_prefix(p) == len(selected)
            assert db.size_prefix(p) == sum(len(self.model[k]) for k in selected)

    @rule(p=dir_prefixes)
    def list_dir(self, p):
        children = set()
        for k in self.model:
            if k.startswith(p):
                rest = k[len(p) :]
                slash = rest.find("/")
                children.add(rest if slash < 0 else rest[: slash + 1])
        with self.reading() as db:
            assert db.list_dir(p) == utf8_order(children)

    # --- transactions (the writer's: the store object's session) ---------------------------

    @precondition(lambda self: self.saved is None)
    @rule(ops=st.lists(write_ops, max_size=5), fail=st.booleans())
    def transaction(self, ops, fail):
        scratch = dict(self.model)
        token = self.writer.begin(0, [])
        for op in ops:
            Ops.apply(self.writer, scratch, op)
        self.writer.end(token, not fail)
        if not fail:
            self.model = scratch

    @precondition(lambda self: self.saved is None)
    @rule(
        outer=st.lists(write_ops, max_size=3),
        inner=st.lists(write_ops, max_size=3),
        after=st.lists(write_ops, max_size=3),
        inner_fails=st.booleans(),
        outer_fails=st.booleans(),
    )
    def nested_transaction(self, outer, inner, after, inner_fails, outer_fails):
        scratch = dict(self.model)
        token = self.writer.begin(0, [])
        for op in outer:
            Ops.apply(self.writer, scratch, op)
        inner_scratch = dict(scratch)
        assert self.writer.begin(token, []) == token  # a savepoint of the open one
        for op in inner:
            Ops.apply(self.writer, inner_scratch, op)
        self.writer.end(token, not inner_fails)
        if not inner_fails:
            scratch = inner_scratch
        for op in after:
            Ops.apply(self.writer, scratch, op)
        self.writer.end(token, not outer_fails)
        if not outer_fails:
            self.model = scratch

    @precondition(lambda self: self.saved is None)
    @rule()
    def begin(self):
        self.token = self.writer.begin(0, [])
        self.saved = dict(self.model)

    @precondition(lambda self: self.saved is not None)
    @rule()
    def commit(self):
        self.writer.end(self.token, True)
        self.saved = None

    @precondition(lambda self: self.saved is not None)
    @rule()
    def rollback(self):
        self.writer.end(self.token, False)
        self.model = self.saved
        self.saved = None

    @invariant()
    def state_matches(self):
        assert self.writer.in_transaction is (self.saved is not None)
        with self.reading() as db:
            assert db.in_transaction is (self.saved is not None)
            assert db.count_prefix("") == len(self.model)

    @precondition(lambda self: len(self.model) > 0)
    @rule()
    def everything(self):
        with self.reading() as db:
            assert db.list_keys() == utf8_order(self.model)
            assert db.get_many(list(self.model)) == list(self.model.values())


DatabaseMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_database_against_a_dict = needs_test_hooks(DatabaseMachine.TestCase)
