"""The agent's files on disk: one directory per task attempt, the shim's JSON records, log tails."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pydantic
from pydantic import Field

from tether.agent.atomic import write_atomically
from tether.model import LogStream, NonEmptyStr, TetherModel, Timestamp, from_json, to_json

_log = logging.getLogger(__name__)

R = TypeVar("R", bound=TetherModel)

STREAMS = tuple(stream.value for stream in LogStream)


class ShimSpec(TetherModel):
    """What the agent tells a shim to run (spec.json). The shim reads it without this model
    (it imports only the standard library), trusting the agent that wrote it."""

    task_id: NonEmptyStr
    argv: list[str] = Field(min_length=1)
    env: dict[str, str]
    cwd: str
    stdout_path: str
    stderr_path: str
    state_path: str
    exit_path: str
    limits: str
    """The limit mode the agent prepared, as TaskStatus.limits reports it."""
    memory_bytes: int = Field(default=0, ge=0)
    """RLIMIT_AS for the "rlimit" mode, and for the fallback when joining the cgroups fails."""
    cgroup_procs: list[str] = Field(default_factory=list)
    """`cgroup.procs` files the task's process writes its own pid into before it runs."""
    cgroups: list[str] = Field(default_factory=list)
    """The task's cgroup directories, removed after it exits."""
    kill_grace_s: float = Field(gt=0)
    fence_path: str | None = None
    """At-most-once attempts only: the machine's fence file (`Fence`), which must name
    `fence_key` and a deadline not yet passed, or the shim kills the task."""
    fence_key: str = ""


class Fence(TetherModel):
    """The machine's fence file (fence.json): the at-most-once attempts its agent holds, and
    until when (monotonic clock) they may run unless the agent renews its lease again. The shim
    reads these fields without the model."""

    attempts: list[str]
    """`AttemptFiles.fence_key` of each attempt."""
    valid_until: float


class ShimState(TetherModel):
    """What a shim writes once it runs (state.json), again once the task's process runs; the
    shim writes these fields without the model."""

    shim_pid: int
    shim_start: int
    """The shim's start time in clock ticks, so that a reused pid is not taken for it."""
    pid: int | None = None
    pid_start: int | None = None
    started_at: Timestamp | None = None
    limits: str = ""


class ShimExit(TetherModel):
    """How the task's process ended (exit.json), written by the shim (without the model) before
    it exits."""

    exit_code: int | None
    """The exit code, or -signal when a signal killed it; None when it never started."""
    stopped: bool = False
    """Whether the shim was told to stop the task (the agent killed it)."""
    finished_at: Timestamp
    message: str = ""


def write_record(path: Path, record: TetherModel) -> None:
    """Writes `record` as JSON atomically: readers see the old file or the whole new one."""
    write_atomically(path, to_json(record))


def read_record(cls: type[R], path: Path) -> R | None:
    """The record in `path`; None when the file is missing or unreadable (which is logged)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        _log.warning("cannot read %s: %s", path, error)
        return None
    try:
        return from_json(cls, data)
    except pydantic.ValidationError as error:
        _log.warning("ignoring malformed %s: %s", path, error)
        return None


def tail(path: Path, max_bytes: int) -> bytes:
    """The last `max_bytes` of the file (all of it when shorter); empty when it does not exist."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - max_bytes))
            return file.read(max_bytes)
    except FileNotFoundError:
        return b""


@dataclass(frozen=True, slots=True, order=True)
class TaskRef:
    """One task of a job: the three segments of its keys."""

    entitlement: str
    job: str
    index: int

    @property
    def task_id(self) -> str:
        """`<entitlement>/<job>/<index>`."""
        return f"{self.entitlement}/{self.job}/{self.index}"


@dataclass(frozen=True, slots=True)
class AttemptFiles:
    """The directory of one attempt of a task and the files in it."""

    task: TaskRef
    attempt: int
    dir: Path

    @property
    def spec(self) -> Path:
        return self.dir / "spec.json"

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    @property
    def exit(self) -> Path:
        return self.dir / "exit.json"

    @property
    def progress(self) -> Path:
        """Where the task writes its step count (`TETHER_PROGRESS_FILE`)."""
        return self.dir / "progress"

    def log(self, stream: str) -> Path:
        """`stdout.log` or `stderr.log`."""
        return self.dir / f"{stream}.log"

    @property
    def fence_key(self) -> str:
        """How the fence file names the attempt."""
        return f"{self.task.task_id}@{self.attempt}"


class WorkDir:
    """`<root>/tasks/<ent>/<job>/<index>/<attempt>/` per attempt, `.../<index>/sandbox/` as
    the working directory every attempt of the task shares, `<root>/host-profile.json` and
    `<root>/fence.json`."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.tasks = self.root / "tasks"
        self.host_profile = self.root / "host-profile.json"
        """The host profile the machine last finished switching to (`CurrentProfile`)."""
        self.fence = self.root / "fence.json"
        """The at-most-once attempts the agent holds (`Fence`)."""

    def task_dir(self, task: TaskRef) -> Path:
        return self.tasks / task.entitlement / task.job / str(task.index)

    def sandbox(self, task: TaskRef) -> Path:
        return self.task_dir(task) / "sandbox"

    def attempt(self, task: TaskRef, attempt: int) -> AttemptFiles:
        return AttemptFiles(task, attempt, self.task_dir(task) / str(attempt))

    def attempts(self, task: TaskRef) -> list[int]:
        """The task's attempt numbers that have a directory, in increasing order."""
        try:
            names = [entry.name for entry in os.scandir(self.task_dir(task)) if entry.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(int(name) for name in names if name.isdecimal())

    def scan(self) -> list[AttemptFiles]:
        """Every attempt directory under the work dir, ordered by task and attempt."""
        found: list[AttemptFiles] = []
        for ent_dir in _subdirs(self.tasks):
            for job_dir in _subdirs(ent_dir):
                for index_dir in _subdirs(job_dir):
                    if not index_dir.name.isdecimal():
                        continue
                    task = TaskRef(ent_dir.name, job_dir.name, int(index_dir.name))
                    found.extend(self.attempt(task, n) for n in self.attempts(task))
        return found

    def prune(self, task: TaskRef, keep: int, busy: set[int]) -> None:
        """Removes all but the newest `keep` attempt directories, never one in `busy`."""
        for attempt in self.attempts(task)[:-keep]:
            if attempt not in busy:
                shutil.rmtree(self.attempt(task, attempt).dir, ignore_errors=True)


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(Path(entry.path) for entry in os.scandir(path) if entry.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []
