"""Killing a task and its shim: at once, or gracefully for every task of a work dir while no
agent runs (`tether down --tasks`)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tether.agent.procfs import is_alive, signal_process
from tether.agent.workdir import ShimState, WorkDir, read_record


def kill_now(state: ShimState) -> None:
    """SIGKILLs the task's process group, then its shim (each only if it is still the one
    `state` identifies)."""
    signal_process(state.pid, state.pid_start, signal.SIGKILL, group=True)
    signal_process(state.shim_pid, state.shim_start, signal.SIGKILL)


def stop_tasks(work_dir: Path, *, grace_s: float = 5.0) -> int:
    """Asks every live shim under `work_dir` to stop its task (SIGTERM, as the agent does), then
    SIGKILLs the task groups and shims still alive after `grace_s`. Returns how many tasks ran."""
    running: list[ShimState] = []
    for attempt in WorkDir(work_dir).scan():
        state = read_record(ShimState, attempt.state)
        if state is not None and signal_process(state.shim_pid, state.shim_start, signal.SIGTERM):
            running.append(state)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(
        is_alive(state.shim_pid, state.shim_start) for state in running
    ):
        time.sleep(0.1)
    for state in running:
        kill_now(state)
    return len(running)
