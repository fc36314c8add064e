"""`python -m zarrdb.demo FILE` reads FILE back with Python's sqlite3 through a URI (issue 37):
built from the path unquoted, a '#' dropped the rest of the URI with its "mode=ro" and a '%41'
named another file, which SQLite then created (read-write, create: the URI's default)."""

from __future__ import annotations

from zarrdb import demo


def test_demo_reads_back_the_file_it_wrote_whatever_its_name(tmp_path, capsys):
    path = tmp_path / "odd%41 ?x=1#frag.zarrdb"
    assert demo.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "read with Python's sqlite3: SQLiteStore 1.0" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no file "oddA " beside it
