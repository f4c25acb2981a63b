"""A task that appends to storage every attempt of it shares, fenced by TETHER_TASK_ATTEMPT.

Tether's `at_most_once` keeps two processes of a task from running at once, but storage outside
the region still sees what an old attempt sent before it died (a write delayed in the network, a
process paused past its fence). The attempt number is a fencing token: it only ever grows for a
task, so the storage keeps the highest it has seen per task and refuses writes that carry a lower
one. Here the storage is a SQLite file (FENCED_DB, shared by the attempts, e.g. on one machine or
a network filesystem); with a database or an object store the check and the write go in one
transaction or one conditional request the same way.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time


def fenced_append(db_path: str, task_id: str, attempt: int, line: str) -> bool:
    """Appends `line` for `task_id` unless a later attempt of the task has written already;
    returns whether it was written."""
    db = sqlite3.connect(db_path, isolation_level=None)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS fence (task TEXT PRIMARY KEY, attempt INTEGER)")
        db.execute("CREATE TABLE IF NOT EXISTS lines (task TEXT, attempt INTEGER, line TEXT)")
        # One transaction takes the write lock before reading: the check and the write are one.
        db.execute("BEGIN IMMEDIATE")
        row = db.execute("SELECT attempt FROM fence WHERE task = ?", (task_id,)).fetchone()
        if row is not None and row[0] > attempt:
            db.execute("ROLLBACK")
            return False
        db.execute(
            "INSERT INTO fence VALUES (?, ?) ON CONFLICT (task) DO UPDATE SET attempt = ?",
            (task_id, attempt, attempt),
        )
        db.execute("INSERT INTO lines VALUES (?, ?, ?)", (task_id, attempt, line))
        db.execute("COMMIT")
        return True
    finally:
        db.close()


def main() -> int:
    db_path = os.environ.get("FENCED_DB", "fenced.db")
    task_id = os.environ["TETHER_TASK_ID"]
    attempt = int(os.environ["TETHER_TASK_ATTEMPT"])
    count = 0
    while True:
        count += 1
        if not fenced_append(db_path, task_id, attempt, f"line {count}"):
            print(f"attempt {attempt} of {task_id} was fenced off; exiting", file=sys.stderr)
            return 1
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
