"""The shims' fork server: real shims forked from a real server, running real commands."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.agent.executor import SHIM_FORK_SERVER_COMMAND, SHIM_PYTHONPATH
from tether.agent.procfs import is_alive, start_ticks
from tether.agent.shimfork import ShimForkServer
from tether.agent.workdir import ShimExit, ShimSpec, ShimState, read_record, write_record


@pytest.fixture
def server() -> Iterator[ShimForkServer]:
    forks = ShimForkServer(
        list(SHIM_FORK_SERVER_COMMAND), {**os.environ, "PYTHONPATH": SHIM_PYTHONPATH}
    )
    try:
        yield forks
    finally:
        forks.close()


def spec_in(directory: Path, argv: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    spec = ShimSpec.model_validate(
        {
            "task_id": "e/j/0",
            "argv": argv,
            "env": {"PATH": os.environ["PATH"]},
            "cwd": str(directory),
            "stdout_path": str(directory / "stdout.log"),
            "stderr_path": str(directory / "stderr.log"),
            "state_path": str(directory / "state.json"),
            "exit_path": str(directory / "exit.json"),
            "limits": "none",
            "kill_grace_s": 0.5,
        }
    )
    write_record(directory / "spec.json", spec)
    return directory / "spec.json"


def wait_for_exit(directory: Path, timeout_s: float = 20) -> ShimExit:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        end = read_record(ShimExit, directory / "exit.json")
        if end is not None:
            return end
        time.sleep(0.02)
    raise AssertionError(f"no exit.json in {directory} after {timeout_s} s")


def wait_until_gone(pid: int, timeout_s: float = 10) -> None:
    """Until `pid` is neither running nor a zombie: whoever parents it reaped it."""
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, f"{pid} was not reaped"
        time.sleep(0.02)


def test_a_forked_shim_runs_its_task_in_a_session_of_its_own(
    server: ShimForkServer, tmp_path: Path
) -> None:
    spec = spec_in(tmp_path / "a", ["sh", "-c", "echo hello; exit 3"])
    pid = server.fork(spec, tmp_path / "a", tmp_path / "a" / "stderr.log")

    assert wait_for_exit(tmp_path / "a").exit_code == 3
    state = read_record(ShimState, tmp_path / "a" / "state.json")
    assert state is not None
    assert state.shim_pid == pid
    assert (tmp_path / "a" / "stdout.log").read_text() == "hello\n"
    # The server reaps the shims that end while it lives: none is left a zombie.
    wait_until_gone(pid)


def test_a_shims_own_complaints_go_to_the_stderr_it_was_given(
    server: ShimForkServer, tmp_path: Path
) -> None:
    stderr = tmp_path / "stderr.log"
    pid = server.fork(tmp_path / "missing.json", tmp_path, stderr)
    wait_until_gone(pid)
    assert "no valid spec" in stderr.read_text()


def test_shims_outlive_the_server(server: ShimForkServer, tmp_path: Path) -> None:
    spec = spec_in(tmp_path / "a", ["sleep", "60"])
    pid = server.fork(spec, tmp_path / "a", tmp_path / "a" / "stderr.log")
    deadline = time.monotonic() + 20
    while (state := read_record(ShimState, tmp_path / "a" / "state.json")) is None or (
        state.pid is None
    ):
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.02)
    assert os.getsid(pid) == pid
    ticks = start_ticks(pid)

    server.close()
    assert is_alive(pid, ticks)
    assert is_alive(state.pid, state.pid_start)

    os.kill(pid, signal.SIGTERM)
    end = wait_for_exit(tmp_path / "a")
    assert end.stopped
    assert end.exit_code == -signal.SIGTERM


def test_a_dead_server_is_started_again(server: ShimForkServer, tmp_path: Path) -> None:
    first = server.fork(spec_in(tmp_path / "a", ["true"]), tmp_path / "a", tmp_path / "a.err")
    assert wait_for_exit(tmp_path / "a").exit_code == 0
    wait_until_gone(first)
    # The server is this process's child (the shims are the server's): kill it.
    servers = [pid for pid in _children() if b"tether.agent.shimfork" in _command_of(pid)]
    assert len(servers) == 1
    os.kill(servers[0], signal.SIGKILL)

    spec = spec_in(tmp_path / "b", ["true"])
    server.fork(spec, tmp_path / "b", tmp_path / "b.err")
    assert wait_for_exit(tmp_path / "b").exit_code == 0


def _children() -> list[int]:
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text()
    return [int(pid) for pid in children.split()]


def _command_of(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
