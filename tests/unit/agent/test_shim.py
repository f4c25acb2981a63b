"""The real shim with real (tiny) commands: exit codes, signals, stopping, state and logs."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.agent.executor import SHIM_PYTHONPATH
from tether.agent.limits import MIB
from tether.agent.procfs import is_alive, start_ticks
from tether.agent.shim import EXIT_NOT_FOUND
from tether.agent.workdir import Fence, ShimExit, ShimSpec, ShimState, read_record, write_record

SHIM_COMMAND = (sys.executable, "-S", "-m", "tether.agent.shim")
"""The shim as a program of its own (the agent forks it from `agent/shimfork.py`)."""


class Run:
    """One shim started on a spec in a temporary attempt directory."""

    def __init__(self, directory: Path, argv: list[str], **extra: object) -> None:
        self.dir = directory
        self.spec = ShimSpec.model_validate(
            {
                "task_id": "e/j/0",
                "argv": argv,
                "env": {"PATH": os.environ["PATH"], "TETHER_TASK_ID": "e/j/0"},
                "cwd": str(directory),
                "stdout_path": str(directory / "stdout.log"),
                "stderr_path": str(directory / "stderr.log"),
                "state_path": str(directory / "state.json"),
                "exit_path": str(directory / "exit.json"),
                "limits": "none",
                "kill_grace_s": 0.5,
                **extra,
            }
        )
        write_record(directory / "spec.json", self.spec)
        # As the agent does: the shim's own complaints go to the task's stderr log.
        with (directory / "stderr.log").open("ab") as stderr:
            self.shim = subprocess.Popen(
                [*SHIM_COMMAND, str(directory / "spec.json")],
                env={**os.environ, "PYTHONPATH": SHIM_PYTHONPATH},
                stderr=stderr,
                start_new_session=True,
            )

    def task_pid(self, timeout_s: float = 10) -> int:
        """The task's pid, once its process runs."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = read_record(ShimState, self.dir / "state.json")
            if state is not None and state.pid is not None:
                assert is_alive(state.pid, state.pid_start)
                return state.pid
            time.sleep(0.02)
        pytest.fail("the shim never recorded the task's pid")

    def end(self, timeout_s: float = 10) -> ShimExit:
        assert self.shim.wait(timeout_s) == 0
        end = read_record(ShimExit, self.dir / "exit.json")
        assert end is not None
        return end

    def log(self, stream: str) -> str:
        return (self.dir / f"{stream}.log").read_text()

    def kill(self) -> None:
        state = read_record(ShimState, self.dir / "state.json")
        if state is not None and state.pid is not None and is_alive(state.pid, state.pid_start):
            os.killpg(state.pid, signal.SIGKILL)
        if self.shim.poll() is None:
            self.shim.kill()
        self.shim.wait()


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[Run]]:
    started: list[Run] = []
    try:
        yield started
    finally:
        for run in started:
            run.kill()


Start = Callable[..., Run]


@pytest.fixture
def start(tmp_path: Path, runs: list[Run]) -> Start:
    def make(argv: list[str], **extra: object) -> Run:
        directory = tmp_path / str(len(runs))
        directory.mkdir()
        run = Run(directory, argv, **extra)
        runs.append(run)
        return run

    return make


def test_exit_code_logs_and_environment(start: Start) -> None:
    run = start(["sh", "-c", 'echo "out $TETHER_TASK_ID $HOME"; echo err >&2; exit 3'])
    end = run.end()
    assert (end.exit_code, end.stopped) == (3, False)
    assert run.log("stdout") == "out e/j/0 \n"  # only the spec's environment: no HOME
    assert run.log("stderr") == "err\n"
    state = read_record(ShimState, run.dir / "state.json")
    assert state is not None
    assert state.pid is not None
    assert state.started_at is not None
    assert state.shim_pid == run.shim.pid


def test_success_is_zero(start: Start) -> None:
    assert start(["true"]).end().exit_code == 0


def test_sigkill_of_the_task_is_minus_nine(start: Start) -> None:
    run = start(["sleep", "30"])
    os.kill(run.task_pid(), signal.SIGKILL)
    end = run.end()
    assert (end.exit_code, end.stopped) == (-9, False)
    assert end.message == "killed by SIGKILL"


def test_sigterm_to_the_shim_stops_the_task(start: Start) -> None:
    run = start(["sleep", "30"])
    pid = run.task_pid()
    run.shim.send_signal(signal.SIGTERM)
    end = run.end()
    assert (end.exit_code, end.stopped) == (-signal.SIGTERM, True)
    assert start_ticks(pid) is None


def test_a_task_ignoring_sigterm_is_killed_after_the_grace(start: Start) -> None:
    run = start(["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"])
    run.task_pid()
    deadline = time.monotonic() + 10
    while "ready" not in run.log("stdout") and time.monotonic() < deadline:
        time.sleep(0.02)
    began = time.monotonic()
    run.shim.send_signal(signal.SIGTERM)
    end = run.end()
    assert end.stopped
    assert end.exit_code == -signal.SIGKILL
    assert time.monotonic() - began >= 0.4  # the spec's grace is 0.5 s


def test_processes_left_in_the_group_are_killed(start: Start) -> None:
    run = start(["sh", "-c", "sleep 30 & echo $!"])
    assert run.end().exit_code == 0
    straggler = int(run.log("stdout"))
    deadline = time.monotonic() + 5
    while start_ticks(straggler) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert start_ticks(straggler) is None


def test_a_missing_command_is_127(start: Start) -> None:
    end = start(["/nonexistent/tether-command"]).end()
    assert end.exit_code == EXIT_NOT_FOUND
    assert "cannot start" in end.message


def test_rlimit_mode_limits_the_address_space(start: Start) -> None:
    script = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    run = start([sys.executable, "-c", script], limits="rlimit", memory_bytes=512 * MIB)
    assert run.end().exit_code == 0
    assert int(run.log("stdout")) == 512 * MIB
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != 512 * MIB  # not the test's own


def test_a_cgroup_that_cannot_be_joined_falls_back_to_rlimit(start: Start, tmp_path: Path) -> None:
    script = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    run = start(
        [sys.executable, "-c", script],
        limits="cgroup-v1",
        memory_bytes=512 * MIB,
        cgroup_procs=[str(tmp_path / "missing" / "cgroup.procs")],
    )
    assert run.end().exit_code == 0
    assert int(run.log("stdout")) == 512 * MIB
    assert "cannot move" in run.log("stderr")
    state = read_record(ShimState, run.dir / "state.json")
    assert state is not None
    assert state.limits == "rlimit"


def test_the_shim_starts_without_pydantic_the_model_or_the_agents_modules() -> None:
    # It starts with every task: importing pydantic and the model cost each start 0.4 s of
    # CPU; logging, dataclasses and tempfile (through the agent's limits) a third of the rest.
    heavy = ("pydantic", "tether.model", "tether.agent.limits", "logging", "tempfile")
    script = (
        "import sys, tether.agent.shim\n"
        f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_an_at_most_once_task_runs_while_the_fence_is_renewed_and_dies_when_it_is_not(
    start: Start, tmp_path: Path
) -> None:
    fence = tmp_path / "fence.json"
    held = ["e/j/0@1"]
    # A long fence while the shim and its task start, however long that takes.
    write_record(fence, Fence(attempts=held, valid_until=time.monotonic() + 60))
    run = start(["sleep", "30"], fence_path=str(fence), fence_key="e/j/0@1")
    pid = run.task_pid()
    # Once the task runs: a short deadline, then its renewal.
    first_until = time.monotonic() + 1.0
    write_record(fence, Fence(attempts=held, valid_until=first_until))
    renewed_until = time.monotonic() + 2.5
    write_record(fence, Fence(attempts=held, valid_until=renewed_until))
    renewed_at = time.monotonic()
    end = run.end()
    # Renewed before the first deadline: the task outlives it, up to the second. (Should the
    # test itself have stalled past the first deadline before renewing, the shim may have
    # killed the task then, rightly.)
    assert time.monotonic() >= (renewed_until if renewed_at < first_until else first_until)
    assert (end.exit_code, end.stopped) == (-signal.SIGKILL, True)
    assert end.message.startswith("fenced: the agent's lease went unrenewed")
    assert start_ticks(pid) is None


def test_an_at_most_once_task_the_fence_no_longer_holds_dies_at_once(
    start: Start, tmp_path: Path
) -> None:
    fence = tmp_path / "fence.json"
    write_record(fence, Fence(attempts=["e/j/0@1"], valid_until=time.monotonic() + 60))
    run = start(["sleep", "30"], fence_path=str(fence), fence_key="e/j/0@1")
    run.task_pid()
    write_record(fence, Fence(attempts=["e/j/1@4"], valid_until=time.monotonic() + 60))
    end = run.end()
    assert end.stopped
    assert end.message.startswith("fenced: the agent no longer holds this attempt")


def test_an_unreadable_fence_holds_nothing(start: Start, tmp_path: Path) -> None:
    run = start(["sleep", "30"], fence_path=str(tmp_path / "missing.json"), fence_key="e/j/0@1")
    end = run.end()
    assert end.stopped
    assert "fence file" in end.message
