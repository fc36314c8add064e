"""OME-Zarr's zipped form (RFC-9, `.ozx`), both ways: `zarrdb.copy` and `zarrdb copy` write an
archive in the recommended layout (every entry stored, ZIP64 records whatever the size, the
root `zarr.json` first and the other `zarr.json` files breadth-first, in the entries and in the
central directory alike, the OME-Zarr version in the archive comment), which zarr's ZipStore,
fsspec's zip file system, Python's zipfile and ngff-zarr (a published RFC-9 reader) read; and
they read an .ozx written by ngff-zarr."""

from __future__ import annotations

import json
import struct
import zipfile

import fsspec
import ngff_zarr
import numpy as np
import pytest
import zarr
from ngff_zarr.rfc9_zip import read_ozx_json_first, read_ozx_version
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, ZipStore

import zarrdb
from cli.helpers import run_here
from zarrdb import SQLiteStore

# ngff-zarr's downsampling (itkwasm) sets an array's shape the way NumPy 2.5 deprecates.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:itkwasm")

IMAGE = np.arange(64 * 48, dtype="uint16").reshape(64, 48)


@pytest.fixture
def ome_file(tmp_path):
    """An OME-Zarr 0.5 image of two scales, written by ngff-zarr, copied into a .zarrdb."""
    image = ngff_zarr.to_ngff_image(IMAGE, dims=["y", "x"])
    folder = tmp_path / "image.ome.zarr"
    ngff_zarr.to_ngff_zarr(str(folder), ngff_zarr.to_multiscales(image, scale_factors=[2]), version="0.5")
    path = tmp_path / "image.zarrdb"
    zarrdb.copy(folder, path)
    return path


def _is_metadata(name: str) -> bool:
    return name.rsplit("/", 1)[-1] == "zarr.json"


def check_rfc9_layout(path) -> list[zipfile.ZipInfo]:
    """Assert the recommended variant of RFC-9 on the archive at `path`; its entries."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        comment = zf.comment
        assert zf.testzip() is None  # every CRC right
    assert infos and infos[0].filename == "zarr.json"
    assert {info.compress_type for info in infos} == {zipfile.ZIP_STORED}
    names = [info.filename for info in infos]
    metadata = [n for n in names if _is_metadata(n)]
    assert names[: len(metadata)] == metadata  # all zarr.json first ...
    depths = [n.count("/") for n in metadata]
    assert depths == sorted(depths)  # ... breadth-first
    # the central directory lists the entries in the order they lie in the file
    offsets = [info.header_offset for info in infos]
    assert offsets == sorted(offsets)
    # ZIP64: an extra field (id 1) in every central record, and the ZIP64 end records
    for info in infos:
        assert struct.unpack("<H", info.extra[:2])[0] == 0x0001
    raw = path.read_bytes()
    assert b"PK\x06\x06" in raw[-200:] and b"PK\x06\x07" in raw[-200:]
    document = json.loads(comment)
    assert document["ome"]["version"] == "0.5"
    return infos


def test_zarrdb_to_ozx_is_rfc9(ome_file, tmp_path):
    out = tmp_path / "image.ozx"
    zarrdb.copy(ome_file, out, verify=True)
    infos = check_rfc9_layout(out)
    with SQLiteStore(ome_file, read_only=True) as store:
        assert len(infos) == len(store.key_sizes())


def test_the_ozx_reads_in_zarr_fsspec_and_ngff_zarr(ome_file, tmp_path):
    out = tmp_path / "image.ozx"
    zarrdb.copy(ome_file, out)
    # zarr's own ZipStore
    store = ZipStore(out, mode="r")
    np.testing.assert_array_equal(zarr.open_array(store, path="scale0/image", mode="r")[:], IMAGE)
    store.close()
    # fsspec's zip file system, under zarr
    assert sorted(fsspec.filesystem("zip", fo=str(out)).find(""))[0] == "scale0/image/c/0/0"
    through_fsspec = FsspecStore.from_url("zip://", storage_options={"fo": str(out)}, read_only=True)
    group = zarr.open_group(through_fsspec, mode="r")
    np.testing.assert_array_equal(group["scale0/image"][:], IMAGE)
    assert group.attrs["ome"]["version"] == "0.5"
    # ngff-zarr, a published RFC-9 reader
    assert read_ozx_version(out) == "0.5" and read_ozx_json_first(out) is True
    multiscales = ngff_zarr.from_ngff_zarr(str(out))
    assert len(multiscales.images) == 2
    np.testing.assert_array_equal(np.asarray(multiscales.images[0].data), IMAGE)


def test_an_ozx_written_by_ngff_zarr_reads_back(tmp_path):
    image = ngff_zarr.to_ngff_image(IMAGE, dims=["y", "x"])
    theirs = tmp_path / "theirs.ozx"
    ngff_zarr.to_ngff_zarr(str(theirs), ngff_zarr.to_multiscales(image, scale_factors=[2]), version="0.5")
    ours = tmp_path / "ours.zarrdb"
    result = zarrdb.copy(theirs, ours, verify=True)
    with zipfile.ZipFile(theirs) as zf:
        assert result.keys == len(zf.infolist())
    with SQLiteStore(ours, read_only=True) as store:
        np.testing.assert_array_equal(zarr.open_array(store, path="scale0/image", mode="r")[:], IMAGE)


def test_the_command_line_both_ways(ome_file, tmp_path, capsys):
    ozx = tmp_path / "published.ozx"
    code, out, err = run_here(capsys, "copy", ome_file, ozx, "--verify", "--json")
    assert code == 0, err
    assert json.loads(out)["verified"] is True
    check_rfc9_layout(ozx)
    for name in ("back.zarrdb", "back.zip"):
        code, out, err = run_here(capsys, "copy", ozx, tmp_path / name, "--verify", "--json")
        assert code == 0, err
    with SQLiteStore(tmp_path / "back.zarrdb", read_only=True) as store:
        np.testing.assert_array_equal(zarr.open_array(store, path="scale0/image", mode="r")[:], IMAGE)
    with zipfile.ZipFile(tmp_path / "back.zip") as zf:  # a .zip: the same layout, no comment
        assert zf.infolist()[0].filename == "zarr.json" and zf.comment == b""


def test_an_ozx_needs_the_root_of_a_hierarchy(ome_file, tmp_path, capsys):
    with pytest.raises(ValueError, match="root"):
        zarrdb.copy(ome_file, tmp_path / "part.ozx", path="scale0", dest_path="elsewhere")
    assert list(tmp_path.glob("part*")) == [] and not list(tmp_path.glob(".part*"))
    code, _, err = run_here(capsys, "copy", ome_file, tmp_path / "part.ozx", "--path", "scale0")
    assert code == 2 and "root" in err and "internal" not in err
    assert list(tmp_path.glob("part*")) == [] and not list(tmp_path.glob(".part*"))


def test_a_plain_hierarchy_as_ozx_has_no_comment(tmp_path):
    path = tmp_path / "plain.zarrdb"
    with SQLiteStore(path) as store:
        zarr.open_group(store, mode="w").create_array("a", shape=(4,), chunks=(2,), dtype="i1")[:] = 1
    with pytest.warns(UserWarning, match="no OME-Zarr version"):
        zarrdb.copy(path, tmp_path / "plain.ozx")
    with zipfile.ZipFile(tmp_path / "plain.ozx") as zf:
        assert zf.comment == b"" and zf.infolist()[0].filename == "zarr.json"


def test_more_entries_than_the_classic_end_record_counts(tmp_path):
    """65,536 entries and more: the classic end record says 0xFFFF ("see the ZIP64 record"),
    and readers take the count from the ZIP64 end record."""
    from zarrdb._zipfiles import write_zip

    path = tmp_path / "many.zip"
    count = 0x10000 + 3
    write_zip(str(path), ((f"a/c/{i}", i.to_bytes(4, "little")) for i in range(count)))
    raw = path.read_bytes()
    classic = raw[raw.rindex(b"PK\x05\x06") :]
    assert struct.unpack("<HH", classic[8:12]) == (0xFFFF, 0xFFFF)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        assert len(infos) == count
        assert zf.read(infos[-1]) == (count - 1).to_bytes(4, "little")
    store = sync(ZipStore.open(path, mode="r"))  # opened: zarr 3.1 does not open on get
    value = sync(store.get("a/c/65538", default_buffer_prototype()))
    assert value is not None and value.to_bytes() == (65538).to_bytes(4, "little")
    store.close()
