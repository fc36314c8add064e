"""Conformance of zarrdb's files to the SQLiteStore 1.0 spec, and interoperability with
zarr-sqlite (the pure-Python reference implementation)."""
