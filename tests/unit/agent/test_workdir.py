"""The work dir: records on disk, scanning attempts, pruning, log tails, process identity."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from tether.agent.procfs import is_alive, start_ticks
from tether.agent.workdir import ShimExit, TaskRef, WorkDir, read_record, tail, write_record

TASK = TaskRef("ent", "job", 2)


def test_records_round_trip_and_bad_files_read_as_none(tmp_path: Path) -> None:
    record = ShimExit(exit_code=-9, finished_at=datetime.now(UTC), message="killed")
    write_record(tmp_path / "exit.json", record)
    assert read_record(ShimExit, tmp_path / "exit.json") == record
    assert [p.name for p in tmp_path.iterdir()] == ["exit.json"]  # no temporary file left
    assert read_record(ShimExit, tmp_path / "missing.json") is None
    (tmp_path / "bad.json").write_text("{not json")
    assert read_record(ShimExit, tmp_path / "bad.json") is None


def test_tail(tmp_path: Path) -> None:
    log = tmp_path / "stdout.log"
    assert tail(log, 10) == b""
    log.write_bytes(b"0123456789abcdef")
    assert tail(log, 4) == b"cdef"
    assert tail(log, 100) == b"0123456789abcdef"
    assert tail(log, 0) == b""


def test_layout(tmp_path: Path) -> None:
    work = WorkDir(tmp_path)
    files = work.attempt(TASK, 7)
    assert files.dir == tmp_path / "tasks" / "ent" / "job" / "2" / "7"
    assert files.spec.name == "spec.json"
    assert files.state.name == "state.json"
    assert files.exit.name == "exit.json"
    assert files.log("stderr") == files.dir / "stderr.log"
    assert work.sandbox(TASK) == tmp_path / "tasks" / "ent" / "job" / "2" / "sandbox"


def test_scan_finds_attempts_in_order_and_skips_other_entries(tmp_path: Path) -> None:
    work = WorkDir(tmp_path)
    for task, attempt in ((TASK, 10), (TASK, 9), (TaskRef("ent", "other", 0), 1)):
        work.attempt(task, attempt).dir.mkdir(parents=True)
    work.sandbox(TASK).mkdir()
    (work.task_dir(TASK) / "notes").mkdir()
    (work.tasks / "ent" / "job" / "not-an-index").mkdir()
    assert work.attempts(TASK) == [9, 10]
    assert [(f.task, f.attempt) for f in work.scan()] == [
        (TASK, 9),
        (TASK, 10),
        (TaskRef("ent", "other", 0), 1),
    ]
    assert WorkDir(tmp_path / "empty").scan() == []


def test_prune_keeps_the_newest_and_busy_attempts(tmp_path: Path) -> None:
    work = WorkDir(tmp_path)
    for attempt in range(1, 7):
        work.attempt(TASK, attempt).dir.mkdir(parents=True)
    work.sandbox(TASK).mkdir()
    work.prune(TASK, keep=3, busy={2})
    assert work.attempts(TASK) == [2, 4, 5, 6]
    assert work.sandbox(TASK).is_dir()


def test_process_identity() -> None:
    me = start_ticks(os.getpid())
    assert me is not None
    assert is_alive(os.getpid(), me)
    assert not is_alive(os.getpid(), me + 1)  # same pid, another start: a reused pid
    assert not is_alive(None, me)
    child = subprocess.Popen(["true"])
    ticks = start_ticks(child.pid)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert ticks is None or not is_alive(child.pid, ticks)  # a zombie is not alive
    child.wait()
    assert start_ticks(child.pid) is None
