"""Process identity from /proc: a pid and its start time name one process despite pid reuse."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TypeGuard

PROC = Path("/proc")


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), or None
    when there is no such process or it is a zombie (it has exited, only its parent's wait is
    missing)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces and ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def is_alive(pid: int | None, ticks: int | None) -> TypeGuard[int]:
    """Whether `pid` still runs and is the process that started at `ticks`; when it does, type
    checkers know that `pid` is an int."""
    return pid is not None and ticks is not None and start_ticks(pid) == ticks


def signal_process(
    pid: int | None, ticks: int | None, signum: signal.Signals, *, group: bool = False
) -> bool:
    """Sends `signum` to the process, or with `group` to the process group it leads, while it is
    still the one identified; returns whether it was."""
    if not is_alive(pid, ticks):
        return False
    try:
        (os.killpg if group else os.kill)(pid, signum)
    except ProcessLookupError:
        return False
    return True
