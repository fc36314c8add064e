"""The files of zarr-python 2's SQLiteStore in tests/data/zarr2 (made by zarr 2 itself with
make_zarr2_fixtures.py), what zarr 2 recorded of them, and checks of what zarrdb makes of them;
shared by tests/format/test_zarr2.py and tests/cli/test_upgrade.py."""

from __future__ import annotations

import json
import shutil
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrdb import conformance

DATA = Path(__file__).resolve().parent.parent / "data" / "zarr2"
HIERARCHY = "hierarchy.sqlite.fixture"
STRINGS = "strings.sqlite.fixture"
EXPECTED = json.loads((DATA / "expected.json").read_text())



def _has_converter() -> bool:
    """Whether this zarr has its v2-to-v3 converter (zarr is a dependency, not an extra)."""
    try:
        import zarr.metadata.migrate_v3  # noqa: F401
    except ImportError:
        return False
    return True


needs_converter = pytest.mark.skipif(
    not _has_converter(),
    reason=f"zarr {zarr.__version__} has no zarr.metadata.migrate_v3 (zarr's v2-to-v3 converter)",
)


def expected_arrays(fixture: str) -> dict[str, np.ndarray]:
    """The arrays of `fixture` as zarr 2 read them back when it wrote the file."""
    with np.load(DATA / "expected.npz") as saved:
        arrays = {
            name.split(":", 1)[1]: saved[name] for name in saved.files if name.startswith(fixture)
        }
    for name, values in EXPECTED["object_arrays"].items():
        if name.startswith(fixture):
            arrays[name.split(":", 1)[1]] = np.array(values, dtype=object)
    return arrays


def nodes(fixture: str) -> dict[str, dict]:
    return EXPECTED["files"][fixture]["nodes"]


def private_copy(tmp_path: Path, fixture: str = HIERARCHY, name: str = "old.sqlite") -> Path:
    """A copy of a fixture that a test may change."""
    path = tmp_path / name
    shutil.copy(DATA / fixture, path)
    return path


def rows(path: Path) -> dict[str, bytes]:
    with sqlite3.connect(path) as con:
        found = {k: bytes(v) for k, v in con.execute("SELECT k, v FROM zarr")}
    con.close()
    return found


def assert_reads_as_zarr2_wrote(store, fixture: str = HIERARCHY, zarr_format: int = 2) -> None:
    """Every array and every node's attributes as zarr 2 recorded them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numcodecs codecs are not in the v3 spec
        root = zarr.open_group(store, mode="r", zarr_format=zarr_format)
        for path, expected in expected_arrays(fixture).items():
            got = root[path][...]
            if expected.dtype == object:  # strings: zarr 3 gives numpy's own string dtype
                assert got.tolist() == expected.tolist(), path
                continue
            assert got.dtype == expected.dtype, path
            np.testing.assert_array_equal(got, expected, err_msg=path)
        for path, node in nodes(fixture).items():
            found = root if not path else root[path]
            assert found.metadata.zarr_format == zarr_format
            assert dict(found.attrs) == node["attributes"], path
            if node["kind"] == "array":
                assert list(found.shape) == node["shape"], path
                assert list(found.chunks) == node["chunks"], path


def assert_conforms(path: Path) -> None:
    """Every rule of SQLiteStore 1.0, checked with Python's sqlite3 (application id, exactly the
    two tables with NOT NULL columns, the required metadata, the keys)."""
    report = conformance.check_file(path)
    assert report.readable
    assert [f.message for f in report.findings if f.level == "problem"] == []
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA application_id").fetchone()[0] == 0x10B50760
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        assert tables == {"zarr", "zarr_sqlitestore_metadata"}
        for table in tables:
            columns = con.execute(f"PRAGMA table_info({table})").fetchall()
            assert [c[3] for c in columns] == [1, 1], table  # NOT NULL on both
        metadata = dict(con.execute("SELECT k, v FROM zarr_sqlitestore_metadata"))
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    con.close()
    assert metadata["sqlitestore_version"] == "1.0"
    assert metadata["compatible_flags"] == metadata["incompatible_flags"] == ""
    assert "zarr-python 2" in metadata["created_by"]
