"""A server that trickles its answer (issue 37, finding 6).

One byte every few seconds never trips the read timeout (the longest silence). What ends such a
request is the deadline of a whole request, `timeout`: stated in DEFAULT_TIMEOUTS, settable in
storage_options (or the obstore store's client options), named in the error, and kept by
zarrdb itself as well, which stops waiting once it has passed, whatever the client does.
"""

from __future__ import annotations

import time

import pytest

from cli.helpers import assert_bad_input
from security._hostile_http import HostileServer
from security._overflow import sound_file
from security.test_remote_hostile import _run_to_error
from zarrdb import SQLiteStore, errors
from zarrdb.remote import DEFAULT_TIMEOUTS


@pytest.fixture
def served(tmp_path) -> bytes:
    return sound_file(tmp_path / "sound.zarrdb").read_bytes()


def test_the_deadline_of_a_request_is_stated():
    assert DEFAULT_TIMEOUTS["timeout"] == "30s"


def test_a_trickling_server_fails_the_command_at_the_deadline(served):
    """A byte every half second, read_timeout 10 s: the command fails once `timeout` (here
    2 s) has passed, in one line naming the deadline and how to give a longer one."""
    with HostileServer(served, "trickle", interval=0.5) as server:
        proc, failed_at = _run_to_error("info", server.url(), "--storage-option", "timeout=2s")
        took = failed_at - server.requests[0].at
        assert server.sent > 0  # it did keep sending
    line = assert_bad_input(proc, "timed out", "timeout=2s", "deadline")
    assert "timeout=120s" in line
    assert took < 6, (took, line)


def test_a_trickle_after_the_opening_request_fails_a_read_at_the_deadline(served):
    """Through a store on an obstore store: the opening request answered, then a read that
    trickles ends with RemoteReadError at the deadline of the store's client options."""
    obstore = pytest.importorskip("obstore")
    with HostileServer(served, "trickle_after_first", interval=0.5) as server:
        client = {"allow_http": True, "timeout": "2s"}
        http = obstore.store.HTTPStore.from_url(server.url("").rstrip("/"), client_options=client)
        store = SQLiteStore.from_object_store(
            http, "data.zarrdb", block_cache={"first_read": 1024, "block_size": 1024}
        )
        started = time.monotonic()
        try:
            with pytest.raises(errors.RemoteReadError, match="deadline"):
                store.get_sync("a/c/2")
        finally:
            store.close()
        assert time.monotonic() - started < 6
