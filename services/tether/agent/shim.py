"""The supervisor of one task attempt (`python -m tether.agent.shim spec.json`).

It runs in a session of its own, so it outlives the agent that started it: it applies the
limits, runs the command, writes state.json once the process runs and exit.json once it ended.
SIGTERM stops the task: SIGTERM to its process group, SIGKILL after the spec's grace period.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from tether.agent.limits import LimitMode, join_cgroups, limit_address_space, remove_cgroups
from tether.agent.procfs import start_ticks
from tether.agent.workdir import ShimExit, ShimSpec, ShimState, read_record, write_record

# The shell's conventions for a command that cannot be run.
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


class Shim:
    """Runs `spec` to completion; `run()` returns once exit.json is written."""

    def __init__(self, spec: ShimSpec) -> None:
        self._spec = spec
        self._process: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._state = ShimState(
            shim_pid=os.getpid(), shim_start=start_ticks(os.getpid()) or 0, limits=spec.limits
        )

    def run(self) -> int:
        write_record(Path(self._spec.state_path), self._state)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._stop)
        signal.signal(signal.SIGALRM, self._force)
        if self._stopped:
            return self._finish(None, "stopped before it started")
        try:
            self._process = self._spawn()
        except OSError as error:
            code = EXIT_NOT_FOUND if error.errno == errno.ENOENT else EXIT_NOT_EXECUTABLE
            return self._finish(code, f"cannot start {self._spec.argv[0]!r}: {error.strerror}")
        pid = self._process.pid
        if self._stopped:
            self._terminate()
        write_record(
            Path(self._spec.state_path),
            self._state.model_copy(
                update={"pid": pid, "pid_start": start_ticks(pid), "started_at": _now()}
            ),
        )
        # Wait without reaping, so that the group id cannot be reused before its stragglers
        # (children the task left behind in its group) are killed.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        _kill_group(pid, signal.SIGKILL)
        code = self._process.wait()
        signal.setitimer(signal.ITIMER_REAL, 0)
        message = f"killed by {signal.Signals(-code).name}" if code < 0 else ""
        return self._finish(code, message)

    def _spawn(self) -> subprocess.Popen[bytes]:
        spec = self._spec
        if spec.cgroup_procs:
            try:
                return self._popen(lambda: join_cgroups(spec.cgroup_procs))
            except subprocess.SubprocessError:
                print(
                    "tether-shim: cannot move the task into its cgroups; "
                    "limiting its memory with RLIMIT_AS instead",
                    file=sys.stderr,
                    flush=True,
                )
                self._state = self._state.model_copy(update={"limits": LimitMode.RLIMIT.value})
        if self._state.limits == LimitMode.RLIMIT:
            return self._popen(lambda: limit_address_space(spec.memory_bytes))
        return self._popen(None)

    def _popen(self, before_exec: Callable[[], None] | None) -> subprocess.Popen[bytes]:
        spec = self._spec
        with open(spec.stdout_path, "ab") as stdout, open(spec.stderr_path, "ab") as stderr:
            return subprocess.Popen(
                spec.argv,
                env=spec.env,
                cwd=spec.cwd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                # Its own group, so that stopping the task reaches the processes it started.
                start_new_session=True,
                preexec_fn=before_exec,
            )

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        if not self._stopped:
            self._stopped = True
            self._terminate()

    def _terminate(self) -> None:
        if self._process is not None and self._process.returncode is None:
            _kill_group(self._process.pid, signal.SIGTERM)
            signal.setitimer(signal.ITIMER_REAL, self._spec.kill_grace_s)

    def _force(self, signum: int, frame: FrameType | None) -> None:
        if self._process is not None and self._process.returncode is None:
            _kill_group(self._process.pid, signal.SIGKILL)

    def _finish(self, exit_code: int | None, message: str) -> int:
        remove_cgroups(Path(cgroup) for cgroup in self._spec.cgroups)
        record = ShimExit(
            exit_code=exit_code, stopped=self._stopped, finished_at=_now(), message=message
        )
        write_record(Path(self._spec.exit_path), record)
        return 0


def _kill_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _now() -> datetime:
    return datetime.now(UTC)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tether.agent.shim <spec.json>", file=sys.stderr)
        return 2
    spec = read_record(ShimSpec, Path(argv[0]))
    if spec is None:
        print(f"tether-shim: no valid spec in {argv[0]}", file=sys.stderr)
        return 2
    return Shim(spec).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
