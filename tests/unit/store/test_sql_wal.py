"""Putting a SQLite store in WAL mode while another connection holds its write lock."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from tether.store.sql_tables import use_wal


def test_the_switch_to_wal_waits_out_another_writer(tmp_path: Path) -> None:
    path = tmp_path / "region.db"
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE t (x)")
    # A writer mid-transaction: SQLite refuses a switch at once then, without a busy wait.
    writer.execute("BEGIN IMMEDIATE")
    opener = sqlite3.connect(path, timeout=5, isolation_level=None)
    refused = threading.Event()

    def commit_once_refused() -> None:
        refused.wait(10)
        # Long enough that a switch without retries meets the lock still held.
        time.sleep(0.3)
        writer.execute("COMMIT")

    committer = threading.Thread(target=commit_once_refused)
    committer.start()
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            opener.execute("PRAGMA journal_mode=WAL")
        refused.set()
        use_wal(opener.cursor(), "main")
    finally:
        refused.set()
        committer.join()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)
