"""The fencing-token example: a write carrying an older attempt than one already seen fails."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).parents[3] / "examples" / "fenced_writer.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fenced_writer", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_write_of_an_older_attempt_is_refused_once_a_newer_one_wrote(tmp_path: Path) -> None:
    append = load_example().fenced_append
    db = str(tmp_path / "shared.db")
    assert append(db, "default/db/0", 5, "first")
    assert append(db, "default/db/0", 5, "second")
    assert append(db, "default/db/0", 7, "from the replacement")
    assert not append(db, "default/db/0", 5, "late write of the old attempt")
    assert append(db, "default/db/1", 2, "another task has its own fence")
    with sqlite3.connect(db) as check:
        lines = check.execute("SELECT task, attempt, line FROM lines ORDER BY rowid").fetchall()
    assert lines == [
        ("default/db/0", 5, "first"),
        ("default/db/0", 5, "second"),
        ("default/db/0", 7, "from the replacement"),
        ("default/db/1", 2, "another task has its own fence"),
    ]


def test_the_task_exits_when_it_finds_itself_fenced_off(tmp_path: Path) -> None:
    db = str(tmp_path / "shared.db")
    assert load_example().fenced_append(db, "default/db/0", 9, "the newer attempt")
    env = {
        "PATH": os.environ["PATH"],
        "FENCED_DB": db,
        "TETHER_TASK_ID": "default/db/0",
        "TETHER_TASK_ATTEMPT": "8",
    }
    ran = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=30
    )
    assert ran.returncode == 1
    assert "attempt 8 of default/db/0 was fenced off" in ran.stderr
