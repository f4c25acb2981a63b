"""How an agent runs attempts: the `Executor` interface, and real processes under shims."""

from __future__ import annotations

import abc
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import tether
from tether.agent.cleanup import kill_now
from tether.agent.limits import Limiter, Limits
from tether.agent.procfs import is_alive, signal_process, start_ticks
from tether.agent.settings import AgentSettings
from tether.agent.shimfork import ShimForkServer
from tether.agent.workdir import (
    AttemptFiles,
    Fence,
    ShimExit,
    ShimSpec,
    ShimState,
    WorkDir,
    read_record,
    write_record,
)
from tether.model import Assignment

DEFAULT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHIM_START_GRACE_S: Final = 10.0
"""How long a shim may take to write its state file before it is taken for dead."""
SHIM_FORK_SERVER_COMMAND: Final = (sys.executable, "-S", "-m", "tether.agent.shimfork")
"""The agent's shims are forked from it. It runs without `site` (-S), as does every shim it
forks: they import only the standard library and `tether.agent`."""
SHIM_PYTHONPATH: Final = str(Path(tether.__file__).resolve().parent.parent)
"""Where the shim finds `tether` without site-packages: where this agent found it."""


@dataclass(frozen=True, slots=True)
class Leftover:
    """An attempt a previous agent left behind."""

    files: AttemptFiles
    settled: bool
    """It ended, or never started: nothing is left to watch unless it is the task's latest."""


class Executor(abc.ABC):
    """Starts, observes and stops the attempts of one agent; the agent decides what runs and
    reports it. Every attempt is named by its `AttemptFiles` (paths only: an executor that
    keeps nothing on disk never touches them).

    An executor is polled: the agent looks at every attempt each `poll_interval_s`, and at
    once when the executor calls the `wake` it was bound to.
    """

    logs: WorkDir | None = None
    """Where the attempts' logs are, for the agent's log server; None: there are no logs."""
    poll_interval_s: float | None = None
    """How often the agent looks at the attempts; None: as its settings say."""

    _wake: Callable[[], None] | None = None

    def bind(self, wake: Callable[[], None]) -> None:
        """Keeps the agent's `wake`, for `wake()`."""
        self._wake = wake

    def wake(self) -> None:
        """Makes the agent look at its attempts now, if one is bound."""
        if self._wake is not None:
            self._wake()

    @abc.abstractmethod
    def prepare(self) -> None:
        """Runs once when the agent starts, before any other call but `bind`."""

    @abc.abstractmethod
    def leftovers(self) -> list[Leftover]:
        """The attempts a previous agent on the same machine left, for adoption."""

    @abc.abstractmethod
    def launch(self, files: AttemptFiles, assignment: Assignment, env: dict[str, str]) -> None:
        """Starts the attempt with `env` as its whole environment; OSError when it cannot. An
        at-most-once attempt runs only while the last `fence` holds it."""

    def progress(self, files: AttemptFiles) -> float | None:
        """The steps the attempt reports having made in all; None: it reports none."""
        return None

    @abc.abstractmethod
    def fence(self, held: Collection[AttemptFiles], valid_until: float) -> None:
        """From now on, the at-most-once attempts in `held` may run until `valid_until`
        (monotonic clock), and no other may run at all."""

    @abc.abstractmethod
    def state(self, files: AttemptFiles) -> ShimState | None:
        """The attempt's process, once known."""

    @abc.abstractmethod
    def end(self, files: AttemptFiles) -> ShimExit | None:
        """How the attempt ended; None while it runs (or before it ever did)."""

    @abc.abstractmethod
    def supervised(self, files: AttemptFiles, state: ShimState | None, since: float) -> bool:
        """Whether the attempt's supervisor still runs; `since` is when the agent launched or
        adopted it (monotonic), `state` what it last knew of it."""

    @abc.abstractmethod
    def stop(self, files: AttemptFiles, state: ShimState | None, *, force: bool) -> None:
        """Asks the attempt to stop (gracefully; at once with `force`)."""

    @abc.abstractmethod
    def orphaned(self, state: ShimState | None) -> None:
        """The supervisor died without recording an end: stops whatever is left of the task."""

    @abc.abstractmethod
    def record_end(self, files: AttemptFiles, end: ShimExit) -> None:
        """Records an end the agent decided (it could not start, or its supervisor died)."""

    @abc.abstractmethod
    def release(self, files: AttemptFiles, keep: int, busy: set[int]) -> None:
        """The attempt's end is reported: forget it, keeping the newest `keep` attempts of the
        task (never one in `busy`) for their logs."""

    @abc.abstractmethod
    def close(self) -> None:
        """The agent stops; its attempts run on. Releases whatever the executor holds."""


class ProcessExecutor(Executor):
    """Each attempt is a real process under a shim (`agent/shim.py`, forked from the agent's
    `ShimForkServer`), in its own session, with files under the work dir: the spec the agent
    writes, the state and exit the shim writes, the logs. Tasks outlive the agent; the next one
    adopts them from the files."""

    def __init__(self, work_dir: WorkDir, settings: AgentSettings, machine_id: str) -> None:
        self.logs = work_dir
        self._work_dir = work_dir
        self._settings = settings
        self._machine_id = machine_id
        self._limiter: Limiter | None = None
        self._fork_server = ShimForkServer(
            list(SHIM_FORK_SERVER_COMMAND), {**os.environ, "PYTHONPATH": SHIM_PYTHONPATH}
        )
        self._shims: dict[AttemptFiles, tuple[int, int | None]] = {}
        """The shims this agent process started: pid and start time (`procfs.start_ticks`)."""

    def prepare(self) -> None:
        self._work_dir.tasks.mkdir(parents=True, exist_ok=True)
        settings = self._settings
        self._limiter = Limiter(settings.cgroup_root, settings.cgroup_mode, self._machine_id)

    def leftovers(self) -> list[Leftover]:
        return [
            Leftover(files, files.exit.exists() or not files.state.exists())
            for files in self._work_dir.scan()
        ]

    def launch(self, files: AttemptFiles, assignment: Assignment, env: dict[str, str]) -> None:
        """Writes the attempt's spec and starts its shim (a quick fork and exec, so inline)."""
        task = files.task
        sandbox = self._work_dir.sandbox(task)
        sandbox.mkdir(parents=True, exist_ok=True)
        files.dir.mkdir(parents=True, exist_ok=True)
        assert self._limiter is not None
        limits = Limits.of(assignment.template.resources)
        placement = self._limiter.prepare(
            f"{task.entitlement}.{task.job}.{task.index}.{assignment.attempt}", limits
        )
        spec = ShimSpec(
            task_id=task.task_id,
            argv=[assignment.template.command, *assignment.template.args],
            env={
                "PATH": os.environ.get("PATH", DEFAULT_PATH),
                "HOME": str(sandbox),
                "LANG": "C.UTF-8",
                **env,
                "TETHER_PROGRESS_FILE": str(files.progress),
            },
            cwd=str(sandbox),
            stdout_path=str(files.log("stdout")),
            stderr_path=str(files.log("stderr")),
            state_path=str(files.state),
            exit_path=str(files.exit),
            limits=placement.mode.value,
            memory_bytes=limits.memory_bytes,
            cgroup_procs=[str(path) for path in placement.procs_files],
            cgroups=[str(path) for path in placement.cgroups],
            kill_grace_s=self._settings.kill_grace_s,
            fence_path=str(self._work_dir.fence) if assignment.at_most_once else None,
            fence_key=files.fence_key if assignment.at_most_once else "",
        )
        write_record(files.spec, spec)
        # The shim's own complaints (and a traceback, should it crash) go to the task's stderr
        # log, where whoever reads the task's logs sees them.
        pid = self._fork_server.fork(files.spec, files.dir, files.log("stderr"))
        self._shims[files] = (pid, start_ticks(pid))

    def fence(self, held: Collection[AttemptFiles], valid_until: float) -> None:
        fence = Fence(attempts=sorted(files.fence_key for files in held), valid_until=valid_until)
        write_record(self._work_dir.fence, fence)

    def state(self, files: AttemptFiles) -> ShimState | None:
        return read_record(ShimState, files.state)

    def progress(self, files: AttemptFiles) -> float | None:
        """The number the task last wrote to its progress file; what is not a finite number
        of 0 or more (a write caught halfway) counts as none."""
        try:
            steps = float(files.progress.read_text().strip())
        except (OSError, ValueError):
            return None
        return steps if math.isfinite(steps) and steps >= 0 else None

    def end(self, files: AttemptFiles) -> ShimExit | None:
        return read_record(ShimExit, files.exit)

    def supervised(self, files: AttemptFiles, state: ShimState | None, since: float) -> bool:
        shim = self._shims.get(files)
        if shim is not None:
            return is_alive(*shim)
        if state is None:
            return time.monotonic() - since < SHIM_START_GRACE_S
        return is_alive(state.shim_pid, state.shim_start)

    def stop(self, files: AttemptFiles, state: ShimState | None, *, force: bool) -> None:
        shim = self._shims.get(files)
        if force:
            if state is not None:
                kill_now(state)
            if shim is not None:
                signal_process(*shim, signal.SIGKILL)
        elif shim is not None:
            signal_process(*shim, signal.SIGTERM)
        elif state is not None:
            signal_process(state.shim_pid, state.shim_start, signal.SIGTERM)

    def orphaned(self, state: ShimState | None) -> None:
        if state is not None:
            # Its task must not run on unsupervised, invisible to every agent.
            signal_process(state.pid, state.pid_start, signal.SIGKILL, group=True)

    def record_end(self, files: AttemptFiles, end: ShimExit) -> None:
        files.dir.mkdir(parents=True, exist_ok=True)
        write_record(files.exit, end)

    def release(self, files: AttemptFiles, keep: int, busy: set[int]) -> None:
        self._shims.pop(files, None)
        self._work_dir.prune(files.task, keep, busy=busy)

    def close(self) -> None:
        self._fork_server.close()
