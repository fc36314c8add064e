"""Hostile inputs: files, keys, URLs and servers crafted as an attacker would, against the real
engine, the real command line (in subprocesses) and real servers on 127.0.0.1. Each test names
the harm it guards against; each failed on the code before its fix.

Hostile files are built here with Python's own `sqlite3` (independently of zarrdb's engine), or
by editing a file's pages; hostile servers listen on loopback only."""
