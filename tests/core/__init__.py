"""Tests of zarrdb._core.Database, the engine."""
