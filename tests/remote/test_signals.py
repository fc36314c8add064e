"""Ctrl-C during a long statement on a remote file raises KeyboardInterrupt, as on a local file.

A remote file's connection adds its fetch failures to the engine's one way of turning a result
code into an exception; it once replaced that way with its own and lost what a signal handler
raised while SQLite ran (the statement stopped, and surfaced as OperationInterruptedError)."""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback

import pytest

from zarrdb import remote

from .conftest import write_hierarchy

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_kill"), reason="POSIX signals sent to a thread"
)

# A statement that never ends and reads no page of the file: once it runs, the main thread stays
# inside SQLite, where only the engine's progress handler lets Python's signal handlers run.
NEVER_ENDING = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
)


def _signal_inside(main_thread: int, line: int, sent: threading.Event) -> None:
    """SIGINT to the main thread once its innermost Python frame is at `line` (the call into
    the engine; from there on no Python code of the main thread runs before the statement), a
    moment later so that SQLite is well into the statement."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(main_thread)
        if frame is not None and frame.f_lineno == line and frame.f_code.co_name == "run":
            time.sleep(0.2)
            sent.set()
            signal.pthread_kill(main_thread, signal.SIGINT)
            return
        time.sleep(0.005)


def test_ctrl_c_in_a_long_statement_on_a_remote_file_raises_keyboard_interrupt(http, tmp_path):
    write_hierarchy(tmp_path / "signals.zarrdb")
    http.put("signals.zarrdb", (tmp_path / "signals.zarrdb").read_bytes())
    opened = remote.open_remote(
        http.url + "signals.zarrdb",
        storage_options={"allow_http": True, "retry_config": {"max_retries": 0}},
    )
    db = opened.connect()
    try:
        keys = db.count_prefix("")  # the schema and the pages read: in the block cache now
        deadline = time.monotonic() + 30
        while opened.stats()["loading"]:  # read-ahead landed
            assert time.monotonic() < deadline
            time.sleep(0.01)
        http.traffic.reset()

        def run():
            return db.execute(NEVER_ENDING)  # the line _signal_inside waits for

        line = run.__code__.co_firstlineno + 1
        sent = threading.Event()
        sender = threading.Thread(
            target=_signal_inside, args=(threading.get_ident(), line, sent), daemon=True
        )
        sender.start()
        with pytest.raises(KeyboardInterrupt) as caught:
            run()
        sender.join(5)
        assert sent.is_set()
        # A fetch runs Python code, where the signal would be seen without the engine.
        assert http.traffic.count() == 0, "the statement fetched: this tested something else"
        # Raised by the engine, once SQLite stopped: not by Python code before the call.
        frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
        assert any("execute" in name for name in frames), frames
        # The interruption is spent: the connection reads on.
        assert db.count_prefix("") == keys
    finally:
        db.close()
