"""Where each structure of an SQLite database file lies, read from the bytes by the rules of
SQLite's file format (https://www.sqlite.org/fileformat2.html), for the fuzz test to aim at:
the 100-byte header, every b-tree page (interior or leaf, of which table or index), overflow
pages, pointer-map pages and freelist pages, and the 4-byte page numbers in them.

Pure Python, no SQLite library: the tests check it against what the standard-library sqlite3
says of the same file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

HEADER_SIZE = 100
INTERIOR_INDEX, INTERIOR_TABLE, LEAF_INDEX, LEAF_TABLE = 2, 5, 10, 13
BTREE_KINDS = {
    INTERIOR_INDEX: "interior",
    INTERIOR_TABLE: "interior",
    LEAF_INDEX: "leaf",
    LEAF_TABLE: "leaf",
}


@dataclass
class Page:
    number: int
    role: str  # "btree", "overflow", "ptrmap", "freelist-trunk", "freelist-leaf", "lock-byte"
    owner: str = ""  # the table or index a b-tree or overflow page belongs to
    kind: str = ""  # "interior" or "leaf", for b-tree pages
    # Byte offsets in the file of the 4-byte big-endian page numbers stored in this page
    # (child pointers, overflow chains, freelist links; pointer-map entries' parent pages).
    pointers: list[int] = field(default_factory=list)
    # The byte ranges [start, end) in the file that SQLite reads: b-tree page headers, cell
    # pointer arrays and cell contents (not the free space between them), the used part of
    # overflow, pointer-map and freelist trunk pages.
    used: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class Layout:
    page_size: int
    usable: int
    page_count: int
    pages: dict[int, Page]
    roots: dict[str, int]  # table or index name -> root page
    auto_vacuum: bool
    freelist_count: int
    # Offsets of the header's page numbers: first freelist trunk page, largest root page.
    header_pointers: list[int] = field(default_factory=list)

    def offset(self, page: int) -> int:
        return (page - 1) * self.page_size

    def count(self, role: str, owner: str | None = None) -> int:
        return sum(1 for p in self.pages.values() if p.role == role and owner in (None, p.owner))


class FormatError(ValueError):
    """The bytes do not follow the file format (the parser is for intact files only)."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """SQLite's big-endian varint at pos: (value, position after it)."""
    value = 0
    for i in range(8):
        byte = data[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    return (value << 8) | data[pos + 8], pos + 9


def _record(payload: bytes) -> list:
    """The values of a record (only as far as the payload at hand reaches)."""
    header_size, pos = _varint(payload, 0)
    types = []
    while pos < header_size:
        serial, pos = _varint(payload, pos)
        types.append(serial)
    values, pos = [], header_size
    int_sizes = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}
    for serial in types:
        if serial == 0:
            values.append(None)
        elif serial in int_sizes:
            n = int_sizes[serial]
            values.append(int.from_bytes(payload[pos : pos + n], "big", signed=True))
            pos += n
        elif serial == 7:
            values.append(struct.unpack(">d", payload[pos : pos + 8])[0])
            pos += 8
        elif serial in (8, 9):
            values.append(serial - 8)
        else:
            n = (serial - 12) // 2
            raw = payload[pos : pos + n]
            values.append(raw.decode("utf-8", "replace") if serial % 2 else raw)
            pos += n
    return values


class _Reader:
    def __init__(self, data: bytes) -> None:
        if len(data) < HEADER_SIZE or not data.startswith(b"SQLite format 3\x00"):
            raise FormatError("not an SQLite 3 database")
        self.data = data
        raw_size = int.from_bytes(data[16:18], "big")
        self.page_size = 65536 if raw_size == 1 else raw_size
        if self.page_size < 512 or self.page_size & (self.page_size - 1):
            # (an earlier mutation of the header, say)
            raise FormatError(f"the header's page size {raw_size} is not a power of two >= 512")
        self.usable = self.page_size - data[20]
        self.page_count = len(data) // self.page_size
        self.pages: dict[int, Page] = {}

    def page(self, number: int) -> bytes:
        if not 1 <= number <= self.page_count:
            raise FormatError(f"page {number} is outside the file")
        start = (number - 1) * self.page_size
        return self.data[start : start + self.page_size]

    def claim(self, page: Page) -> None:
        if page.number in self.pages:
            raise FormatError(f"page {page.number} is used twice")
        self.pages[page.number] = page

    def payload_split(self, total: int, is_table_leaf: bool) -> int:
        """How many bytes of a payload of `total` bytes stay on the b-tree page."""
        u = self.usable
        most = u - 35 if is_table_leaf else ((u - 12) * 64 // 255) - 23
        if total <= most:
            return total
        least = ((u - 12) * 32 // 255) - 23
        k = least + (total - least) % (u - 4)
        return k if k <= most else least

    def overflow_chain(self, first: int, remaining: int, owner: str) -> None:
        number = first
        while remaining > 0:
            start = (number - 1) * self.page_size
            here = min(remaining, self.usable - 4)
            self.claim(
                Page(
                    number,
                    "overflow",
                    owner=owner,
                    pointers=[start],
                    used=[(start, start + 4 + here)],
                )
            )
            data = self.page(number)
            remaining -= here
            number = int.from_bytes(data[:4], "big")
            if remaining > 0 and number == 0:
                raise FormatError("an overflow chain ends early")

    def btree(self, root: int, owner: str) -> list[bytes]:
        """Walks the b-tree at root, claiming its pages; the local payloads of the table
        leaf cells (for the schema table)."""
        payloads: list[bytes] = []
        stack = [root]
        while stack:
            number = stack.pop()
            data = self.page(number)
            base = HEADER_SIZE if number == 1 else 0
            kind = data[base]
            if kind not in BTREE_KINDS:
                raise FormatError(f"page {number} of {owner} is not a b-tree page ({kind})")
            interior = kind in (INTERIOR_INDEX, INTERIOR_TABLE)
            page = Page(number, "btree", owner=owner, kind=BTREE_KINDS[kind])
            page_start = (number - 1) * self.page_size
            cells = int.from_bytes(data[base + 3 : base + 5], "big")
            header = 12 if interior else 8
            content = int.from_bytes(data[base + 5 : base + 7], "big") or 65536
            page.used = [
                (page_start + base, page_start + base + header + 2 * cells),
                (page_start + content, page_start + self.usable),
            ]
            if interior:
                page.pointers.append(page_start + base + 8)
                stack.append(int.from_bytes(data[base + 8 : base + 12], "big"))
            for i in range(cells):
                at = base + header + 2 * i
                cell = int.from_bytes(data[at : at + 2], "big")
                if interior:
                    page.pointers.append(page_start + cell)
                    stack.append(int.from_bytes(data[cell : cell + 4], "big"))
                    if kind == INTERIOR_TABLE:
                        continue
                    cell += 4
                total, pos = _varint(data, cell)
                if kind == LEAF_TABLE:
                    _, pos = _varint(data, pos)  # the rowid
                local = self.payload_split(total, kind == LEAF_TABLE)
                if kind == LEAF_TABLE:
                    payloads.append(data[pos : pos + local])
                if local < total:
                    at = pos + local
                    page.pointers.append(page_start + at)
                    first = int.from_bytes(data[at : at + 4], "big")
                    self.overflow_chain(first, total - local, owner)
            self.claim(page)
        return payloads

    def freelist(self, first_trunk: int) -> None:
        number = first_trunk
        while number:
            data = self.page(number)
            start = (number - 1) * self.page_size
            count = int.from_bytes(data[4:8], "big")
            pointers = [start] + [start + 8 + 4 * i for i in range(count)]
            used = [(start, start + 8 + 4 * count)]
            self.claim(Page(number, "freelist-trunk", pointers=pointers, used=used))
            for i in range(count):
                leaf = int.from_bytes(data[8 + 4 * i : 12 + 4 * i], "big")
                self.claim(Page(leaf, "freelist-leaf"))
            number = int.from_bytes(data[:4], "big")

    def ptrmap(self) -> None:
        per_page = self.usable // 5
        number = 2
        while number <= self.page_count:
            start = (number - 1) * self.page_size
            # Each 5-byte entry: a type byte, then the parent page number.
            entries = min(per_page, self.page_count - number)
            pointers = [start + 5 * i + 1 for i in range(entries)]
            used = [(start, start + 5 * entries)]
            self.claim(Page(number, "ptrmap", pointers=pointers, used=used))
            number += per_page + 1


def layout(data: bytes) -> Layout:
    """The layout of an intact database file (raises FormatError otherwise)."""
    reader = _Reader(data)
    auto_vacuum = int.from_bytes(data[52:56], "big") != 0
    if auto_vacuum:
        reader.ptrmap()
    lock_page = (1 << 30) // reader.page_size + 1
    if lock_page <= reader.page_count:
        reader.claim(Page(lock_page, "lock-byte"))
    roots = {"sqlite_schema": 1}
    for row in reader.btree(1, "sqlite_schema"):
        values = _record(row)
        if len(values) >= 4 and values[0] in ("table", "index") and values[3]:
            roots[values[1]] = values[3]
    for name, root in roots.items():
        if root != 1:
            reader.btree(root, name)
    reader.freelist(int.from_bytes(data[32:36], "big"))
    missing = sorted(set(range(1, reader.page_count + 1)) - set(reader.pages))
    if missing:
        raise FormatError(f"pages {missing[:10]} belong to nothing")
    return Layout(
        page_size=reader.page_size,
        usable=reader.usable,
        page_count=reader.page_count,
        pages=reader.pages,
        roots=roots,
        auto_vacuum=auto_vacuum,
        freelist_count=int.from_bytes(data[36:40], "big"),
        header_pointers=[32, 52] if auto_vacuum else [32],
    )


# --- editing: overflow chains that loop, values that claim more than the file holds -----------------


def encode_varint(value: int) -> bytes:
    """SQLite's big-endian varint of `value` (0 to 2**64 - 1), as short as it can be."""
    if value > 0x00FFFFFFFFFFFFFF:  # nine bytes: the last one holds 8 bits
        head, last = value >> 8, value & 0xFF
        out = [last]
        for _ in range(8):
            out.append((head & 0x7F) | 0x80)
            head >>= 7
        return bytes(reversed(out))
    out = [value & 0x7F]
    value >>= 7
    while value:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(reversed(out))


@dataclass
class Cell:
    """A cell of a table leaf page: its row, its payload's declared size, the part of the
    payload kept on the page and the first page of its overflow chain (0: none)."""

    rowid: int
    payload_size: int
    local: bytes
    overflow: int

    def encode(self) -> bytes:
        pointer = self.overflow.to_bytes(4, "big") if self.overflow else b""
        return encode_varint(self.payload_size) + encode_varint(self.rowid) + self.local + pointer


def table_leaf_cells(data: bytes, number: int) -> list[Cell]:
    """The cells of table leaf page `number`, in their order on the page."""
    reader = _Reader(data)
    page = reader.page(number)
    base = HEADER_SIZE if number == 1 else 0
    if page[base] != LEAF_TABLE:
        raise FormatError(f"page {number} is not a table leaf page")
    cells = []
    for i in range(int.from_bytes(page[base + 3 : base + 5], "big")):
        at = int.from_bytes(page[base + 8 + 2 * i : base + 10 + 2 * i], "big")
        total, pos = _varint(page, at)
        rowid, pos = _varint(page, pos)
        local = reader.payload_split(total, True)
        overflow = int.from_bytes(page[pos + local : pos + local + 4], "big") if local < total else 0
        cells.append(Cell(rowid, total, bytes(page[pos : pos + local]), overflow))
    return cells


def write_table_leaf(data: bytearray, number: int, cells: list[Cell]) -> None:
    """Rewrite table leaf page `number` (not page 1) to hold exactly `cells`, packed at its
    end, as SQLite lays out a freshly built page."""
    reader = _Reader(bytes(data))
    if number == 1:
        raise ValueError("page 1 holds the file header; rewrite other leaf pages only")
    page = bytearray(reader.page_size)
    content = reader.usable
    pointers = []
    for cell in cells:
        raw = cell.encode()
        content -= len(raw)
        page[content : content + len(raw)] = raw
        pointers.append(content)
    if content < 8 + 2 * len(cells):
        raise ValueError(f"the cells do not fit on page {number}")
    page[0] = LEAF_TABLE
    page[3:5] = len(cells).to_bytes(2, "big")
    page[5:7] = content.to_bytes(2, "big")
    for i, at in enumerate(pointers):
        page[8 + 2 * i : 10 + 2 * i] = at.to_bytes(2, "big")
    start = (number - 1) * reader.page_size
    data[start : start + reader.page_size] = page


def overflow_chain(data: bytes, first: int) -> list[int]:
    """The page numbers of the overflow chain starting at `first`, up to its end (a 0 link) or
    to the first page seen twice."""
    reader = _Reader(data)
    chain: list[int] = []
    number = first
    while number and number not in chain:
        chain.append(number)
        number = int.from_bytes(reader.page(number)[:4], "big")
    return chain


def _record_header(payload: bytes) -> tuple[list[int], int]:
    """The serial types of a record and the size of its header."""
    header_size, pos = _varint(payload, 0)
    types = []
    while pos < header_size:
        serial, pos = _varint(payload, pos)
        types.append(serial)
    return types, header_size


def _serial_size(serial: int) -> int:
    return {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0, 9: 0}.get(
        serial, (serial - 12) // 2
    )


def claim_blob(data: bytes, cell: Cell, size: int, first_overflow: int) -> Cell:
    """`cell` with its record's last column (a BLOB) declared `size` bytes long (or a little
    more: the size is rounded so that the payload kept on the page stays SQLite's minimum)
    and its overflow chain starting at `first_overflow`. The bytes of the columns before it
    stay on the page; the value's own bytes are whatever the chain holds."""
    reader = _Reader(data)
    types, header_size = _record_header(cell.local)
    before = b"".join(encode_varint(t) for t in types[:-1])
    kept = cell.local[header_size : header_size + sum(_serial_size(t) for t in types[:-1])]
    least = ((reader.usable - 12) * 32 // 255) - 23
    step = reader.usable - 4
    while True:
        columns = before + encode_varint(2 * size + 12)
        if len(columns) + 1 > 127:
            raise ValueError("a record header of over 127 bytes")
        header = encode_varint(len(columns) + 1) + columns  # its size: a 1-byte varint
        total = len(header) + len(kept) + size
        if (total - least) % step == 0:
            break
        size += step - (total - least) % step
    local = reader.payload_split(total, True)
    assert local == least, (local, least)
    body = (header + kept).ljust(local, b"\0")[:local]
    return Cell(cell.rowid, total, body, first_overflow)


def make_overflow_bomb(data: bytes, leaf: int, size: int, keys: int | None = None) -> bytes:
    """A copy of the file in which the overflow chain of the first value on the table leaf page
    `leaf` (the root of a small table) loops back to its start, and the values of up to `keys`
    rows of that page that have an overflow chain (all by default) each claim `size` bytes of
    that same chain: a few KB that read as `keys` values of `size` bytes. ValueError if no
    value there has a chain, or the rewritten cells do not fit on the page."""
    out = bytearray(data)
    cells = table_leaf_cells(data, leaf)
    chained = [i for i, cell in enumerate(cells) if cell.overflow]
    if not chained:
        raise ValueError("no value of the table has an overflow chain")
    chain = overflow_chain(data, cells[chained[0]].overflow)
    reader = _Reader(data)
    last = (chain[-1] - 1) * reader.page_size
    out[last : last + 4] = chain[0].to_bytes(4, "big")
    for i in chained[: keys if keys is not None else len(chained)]:
        cells[i] = claim_blob(data, cells[i], size, chain[0])
    write_table_leaf(out, leaf, cells)
    return bytes(out)
