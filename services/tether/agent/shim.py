"""The supervisor of one task attempt (`python -m tether.agent.shim spec.json`).

It runs in a session of its own, so it outlives the agent that started it: it applies the
limits, runs the command, writes state.json once the process runs and exit.json once it ended.
SIGTERM stops the task: SIGTERM to its process group, SIGKILL after the spec's grace period.

An at-most-once attempt (the spec names a fence file) runs only while the agent's fence file
names it and its deadline has not passed: the agent extends the deadline on every renewal of its
lease, so the task dies on time whether its agent is cut off from the store, hung or dead.

It imports only the standard library: it starts with every task, and importing pydantic and the
model would cost each start 0.4 s of CPU. It reads the spec the agent wrote with `ShimSpec` as
plain JSON, and writes the fields of `ShimState` and `ShimExit` (tests check them against the
models).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from tether.agent.atomic import write_atomically
from tether.agent.confine import LimitMode, join_cgroups, limit_address_space, remove_cgroups
from tether.agent.procfs import start_ticks

# The shell's conventions for a command that cannot be run.
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
FENCE_POLL_S = 0.2
"""How often an at-most-once attempt's shim reads the fence file."""


class Spec:
    """The fields of a `ShimSpec` that the shim uses, read from the agent's spec.json."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.argv: list[str] = fields["argv"]
        self.env: dict[str, str] = fields["env"]
        self.cwd: str = fields["cwd"]
        self.stdout_path: str = fields["stdout_path"]
        self.stderr_path: str = fields["stderr_path"]
        self.state_path = Path(fields["state_path"])
        self.exit_path = Path(fields["exit_path"])
        self.limits: str = fields["limits"]
        self.memory_bytes: int = fields.get("memory_bytes", 0)
        self.cgroup_procs: list[str] = fields.get("cgroup_procs", [])
        self.cgroups: list[str] = fields.get("cgroups", [])
        self.kill_grace_s: float = fields["kill_grace_s"]
        fence_path = fields.get("fence_path")
        self.fence_path = None if fence_path is None else Path(fence_path)
        self.fence_key: str = fields.get("fence_key", "")


class Shim:
    """Runs `spec` to completion; `run()` returns once exit.json is written."""

    def __init__(self, spec: Spec) -> None:
        self._spec = spec
        self._process: subprocess.Popen[bytes] | None = None
        self._stopped = False
        self._fenced = ""
        """Why the fence killed the task; empty while it has not."""
        self._reaping = threading.Lock()
        """Held by whoever signals the task's group, and while it is reaped: a reaped group's
        id may be reused."""
        # A ShimState's fields.
        self._state: dict[str, Any] = {
            "shim_pid": os.getpid(),
            "shim_start": start_ticks(os.getpid()) or 0,
            "pid": None,
            "pid_start": None,
            "started_at": None,
            "limits": spec.limits,
        }

    def run(self) -> int:
        _write(self._spec.state_path, self._state)
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
        self._state |= {"pid": pid, "pid_start": start_ticks(pid), "started_at": _now()}
        _write(self._spec.state_path, self._state)
        if self._spec.fence_path is not None:
            threading.Thread(target=self._keep_fence, name="fence", daemon=True).start()
        # Wait without reaping, so that the group id cannot be reused before its stragglers
        # (children the task left behind in its group) are killed.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        with self._reaping:
            _kill_group(pid, signal.SIGKILL)
            code = self._process.wait()
        signal.setitimer(signal.ITIMER_REAL, 0)
        message = f"killed by {signal.Signals(-code).name}" if code < 0 else ""
        return self._finish(code, self._fenced or message)

    def _keep_fence(self) -> None:
        """Kills the task's group once the fence no longer holds this attempt."""
        fence_path, process = self._spec.fence_path, self._process
        assert fence_path is not None
        assert process is not None
        while True:
            reason = fence_broken(fence_path, self._spec.fence_key, time.monotonic())
            if reason:
                with self._reaping:
                    if process.returncode is None:
                        self._fenced = f"fenced: {reason}"
                        _kill_group(process.pid, signal.SIGKILL)
                return
            time.sleep(FENCE_POLL_S)

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
                self._state["limits"] = LimitMode.RLIMIT.value
        if self._state["limits"] == LimitMode.RLIMIT:
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
        # A ShimExit's fields.
        record = {
            "exit_code": exit_code,
            "stopped": self._stopped or bool(self._fenced),
            "finished_at": _now(),
            "message": message,
        }
        _write(self._spec.exit_path, record)
        return 0


def fence_broken(path: Path, key: str, now: float) -> str:
    """Why the fence file at `path` does not let attempt `key` run at monotonic time `now`;
    empty when it does. A missing or unreadable file holds nothing."""
    try:
        fence = json.loads(path.read_bytes())
        attempts = list(fence["attempts"])
        valid_until = float(fence["valid_until"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"the agent's fence file {path} cannot be read: {error!r}"
    return fence_verdict(attempts, valid_until, key, now)


def fence_verdict(attempts: Collection[str], valid_until: float, key: str, now: float) -> str:
    """Why a fence holding `attempts` until `valid_until` does not let attempt `key` run at
    `now` (monotonic); empty when it does."""
    if key not in attempts:
        return "the agent no longer holds this attempt (its assignment was gone when it checked)"
    if now > valid_until:
        return (
            "the agent's lease went unrenewed for the fencing period "
            f"(the fence expired {now - valid_until:.1f}s ago)"
        )
    return ""


def _kill_group(pgid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _now() -> str:
    """Now, as the models' timestamps are written (ISO 8601 with the UTC offset)."""
    return datetime.now(UTC).isoformat()


def _write(path: Path, fields: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(fields).encode())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tether.agent.shim <spec.json>", file=sys.stderr)
        return 2
    try:
        spec = Spec(json.loads(Path(argv[0]).read_bytes()))
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"tether-shim: no valid spec in {argv[0]}: {error!r}", file=sys.stderr)
        return 2
    return Shim(spec).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
