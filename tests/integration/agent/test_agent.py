"""The agent against a real store, with real shims, tasks, signals and HTTP on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.machines import eventually
from tether.agent.cleanup import kill_now
from tether.agent.procfs import start_ticks
from tether.agent.service import Agent
from tether.agent.settings import AgentSettings
from tether.agent.workdir import ShimState, TaskRef, WorkDir, read_record
from tether.model import (
    AgentHeartbeat,
    Assignment,
    DesiredState,
    Machine,
    Resources,
    TaskState,
    TaskStatus,
    TaskTemplate,
    Topology,
    from_json,
    to_json,
)
from tether.store import Delete, Put, Store, keys, open_store

ENT, JOB = "ent", "job"
HANDLE = f"{ENT}/{JOB}"
CGROUP_ROOT = Path("/sys/fs/cgroup")
PRINT_ENV_AND_SLEEP = (
    "import os, time\n"
    "print(' '.join(f'{k}={v}' for k, v in sorted(os.environ.items()) if k.startswith('TETHER_')),"
    " flush=True)\n"
    "time.sleep(120)\n"
)
ENDED = {TaskState.EXITED, TaskState.FAILED, TaskState.KILLED}

StartAgent = Callable[[], Awaitable[Agent]]


def kill_leftovers(work_dir: Path, machine_id: str) -> None:
    """Kills every shim and task a test left under `work_dir`, and removes their cgroups."""
    for state_file in work_dir.rglob("state.json"):
        state = read_record(ShimState, state_file)
        if state is not None:
            kill_now(state)
    for base in (CGROUP_ROOT, CGROUP_ROOT / "memory", CGROUP_ROOT / "cpu"):
        machine_dir = base / "tether" / machine_id
        for cgroup in sorted(machine_dir.glob("*"), reverse=True):
            with contextlib.suppress(OSError):
                cgroup.rmdir()
        with contextlib.suppress(OSError):
            machine_dir.rmdir()


@pytest.fixture
def machine() -> Machine:
    return Machine(
        id=f"it-{uuid.uuid4().hex[:10]}",
        hostname="localhost",
        topology=Topology(region="local", dc="dc1", msb="msb1", rack="rack1"),
        hardware_type="local",
        capacity=Resources(cpu=4000, memory_mib=4096),
        attributes={"zone": "a"},
    )


@pytest.fixture
def work_dir(tmp_path: Path, machine: Machine) -> Iterator[Path]:
    path = tmp_path / "agent"
    try:
        yield path
    finally:
        kill_leftovers(path, machine.id)


@pytest.fixture
async def start_agent(
    store_url: str, work_dir: Path, machine: Machine
) -> AsyncIterator[StartAgent]:
    """Starts agents of `machine` on `work_dir` (one at a time); stops them at the end."""
    running: list[Agent] = []

    async def start() -> Agent:
        settings = AgentSettings(
            work_dir=work_dir, lease_ttl_s=2, poll_interval_s=0.1, kill_grace_s=1
        )
        agent = Agent(machine, settings, open_store(store_url))
        await agent.start()
        running.append(agent)
        return agent

    try:
        yield start
    finally:
        for agent in running:
            with contextlib.suppress(Exception):
                await agent.stop()


async def stop(agent: Agent) -> None:
    await agent.stop()


def assignment_put(
    machine: Machine,
    index: int,
    attempt: int,
    script: str = PRINT_ENV_AND_SLEEP,
    desired: DesiredState = DesiredState.RUNNING,
    command: str = sys.executable,
) -> Put:
    """The write of the task's assignment, as the scheduler makes it."""
    template = TaskTemplate(
        package="demo",
        version="1.0",
        command=command,
        args=["-c", script],
        resources=Resources(cpu=200, memory_mib=256),
    )
    assignment = Assignment(
        job=HANDLE,
        index=index,
        attempt=attempt,
        generation=1,
        desired=desired,
        template=template,
    )
    return Put(keys.assignment(machine.id, ENT, JOB, index), to_json(assignment))


async def assign(store: Store, machine: Machine, index: int, attempt: int, **fields: Any) -> None:
    """Writes the task's assignment; `fields` as `assignment_put` takes them."""
    await store.txn([], [assignment_put(machine, index, attempt, **fields)])


async def unassign(store: Store, machine: Machine, index: int) -> None:
    await store.txn([], [Delete(keys.assignment(machine.id, ENT, JOB, index))])


async def read_status(store: Store, index: int) -> TaskStatus | None:
    kv = await store.get(keys.task_status(ENT, JOB, index))
    return None if kv is None else from_json(TaskStatus, kv.value, stored=True)


async def wait_status(store: Store, index: int, attempt: int, state: TaskState) -> TaskStatus:
    """The task's status once it reports `state` for `attempt`."""
    status = await eventually(
        lambda: read_status(store, index),
        lambda seen: seen is not None and seen.attempt == attempt and seen.state is state,
        timeout_s=20,
        what=f"task {index} to report {state} for attempt {attempt}",
    )
    assert status is not None
    return status


async def wait_gone(pid: int) -> None:
    async def ticks() -> int | None:
        return start_ticks(pid)

    await eventually(ticks, lambda found: found is None, timeout_s=10, what=f"process {pid} to end")


async def fetch_log(address: str, index: int, **params: str | int) -> httpx.Response:
    async with httpx.AsyncClient(base_url=address, timeout=5) as client:
        return await client.get(f"/v1/tasks/{ENT}/{JOB}/{index}/logs", params=params)


async def wait_log(address: str, index: int, needle: str) -> str:
    def shows_needle(response: httpx.Response) -> bool:
        assert response.status_code == 200, response.text
        return needle in response.text

    response = await eventually(
        lambda: fetch_log(address, index),
        shows_needle,
        timeout_s=10,
        what=f"the log of task {index} to show {needle!r}",
    )
    return response.text


def proc_file(pid: int, name: str) -> str:
    """/proc/<pid>/<name>: a link's target or a file's text."""
    path = Path(f"/proc/{pid}/{name}")
    return os.readlink(path) if path.is_symlink() else path.read_text()


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if item)


async def test_heartbeat_is_on_a_lease_and_names_the_log_server(
    store: Store, start_agent: StartAgent, machine: Machine
) -> None:
    agent = await start_agent()
    kv = await store.get(keys.heartbeat(machine.id))
    assert kv is not None
    assert kv.lease != 0
    heartbeat = from_json(AgentHeartbeat, kv.value, stored=True)
    assert heartbeat.machine == machine
    assert heartbeat.pid == os.getpid()
    assert heartbeat.address == agent.address
    async with httpx.AsyncClient(base_url=heartbeat.address, timeout=5) as client:
        assert (await client.get("/healthz")).status_code == 200
        missing = await client.get("/v1/tasks/ent/job/0/logs")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"

    # Someone else ends the lease: the agent notices and registers again on a new one.
    await store.lease_revoke(kv.lease)
    await eventually(
        lambda: store.get(keys.heartbeat(machine.id)),
        lambda again: again is not None and again.lease not in (0, kv.lease),
        timeout_s=10,
        what="the agent's heartbeat on a new lease",
    )

    await stop(agent)
    assert await store.get(keys.heartbeat(machine.id)) is None


async def test_task_lifecycle(
    store: Store, start_agent: StartAgent, machine: Machine, work_dir: Path
) -> None:
    agent = await start_agent()
    await assign(store, machine, 0, attempt=1)
    running = await wait_status(store, 0, 1, TaskState.RUNNING)
    assert running.machine == machine.id
    assert running.pid is not None
    assert running.started_at is not None
    assert running.limits in ("cgroup-v2", "cgroup-v1", "rlimit")
    env = environ(running.pid)
    assert env["TETHER_TASK_ID"] == "ent/job/0"
    assert env["TETHER_JOB"] == HANDLE
    assert env["TETHER_TASK_INDEX"] == "0"
    assert env["TETHER_TASK_ATTEMPT"] == "1"
    assert env["TETHER_MACHINE"] == machine.id
    assert proc_file(running.pid, "cwd") == str(WorkDir(work_dir).sandbox(TaskRef(ENT, JOB, 0)))
    if running.limits.startswith("cgroup"):
        assert f"/tether/{machine.id}/ent.job.0.1" in proc_file(running.pid, "cgroup")

    text = await wait_log(agent.address, 0, "TETHER_TASK_ID=ent/job/0")
    assert f"TETHER_MACHINE={machine.id}" in text
    assert (await fetch_log(agent.address, 0, stream="nope")).status_code == 400

    # Killed behind the agent's back: a failure with the signal.
    os.kill(running.pid, signal.SIGKILL)
    failed = await wait_status(store, 0, 1, TaskState.FAILED)
    assert failed.exit_code == -9
    assert failed.finished_at is not None
    assert failed.pid == running.pid

    # A restart in place is a new attempt.
    await assign(store, machine, 0, attempt=2)
    second = await wait_status(store, 0, 2, TaskState.RUNNING)
    assert second.pid != running.pid
    # A newer attempt replaces the running one.
    await assign(store, machine, 0, attempt=3)
    third = await wait_status(store, 0, 3, TaskState.RUNNING)
    assert second.pid is not None
    await wait_gone(second.pid)
    assert environ(third.pid or 0)["TETHER_TASK_ATTEMPT"] == "3"
    # Running means the process exists, not that it has printed yet.
    await wait_log(agent.address, 0, "TETHER_TASK_ATTEMPT=3")

    # desired=stopped kills it and says so.
    await assign(store, machine, 0, attempt=3, desired=DesiredState.STOPPED)
    killed = await wait_status(store, 0, 3, TaskState.KILLED)
    assert killed.exit_code == -signal.SIGTERM
    await wait_gone(third.pid or 0)

    # So does removing the assignment.
    await assign(store, machine, 0, attempt=4)
    fourth = await wait_status(store, 0, 4, TaskState.RUNNING)
    await unassign(store, machine, 0)
    await wait_status(store, 0, 4, TaskState.KILLED)
    await wait_gone(fourth.pid or 0)

    # Old attempts' logs stay readable until pruned: the last three attempts are kept.
    assert WorkDir(work_dir).attempts(TaskRef(ENT, JOB, 0)) == [2, 3, 4]
    old = await fetch_log(agent.address, 0, attempt=3)
    assert "TETHER_TASK_ATTEMPT=3" in old.text
    assert (await fetch_log(agent.address, 0, attempt=1)).status_code == 404


async def test_tasks_survive_a_restart_and_are_adopted(
    store: Store, start_agent: StartAgent, machine: Machine, work_dir: Path
) -> None:
    first = await start_agent()
    for index in range(3):
        await assign(store, machine, index, attempt=1)
    pids = [(await wait_status(store, i, 1, TaskState.RUNNING)).pid or 0 for i in range(3)]
    await stop(first)
    assert all(start_ticks(pid) is not None for pid in pids)  # stopping the agent kills nothing

    # While no agent runs: task 1 dies, and task 2 is to be stopped.
    os.kill(pids[1], signal.SIGKILL)
    await wait_gone(pids[1])
    await assign(store, machine, 2, attempt=1, desired=DesiredState.STOPPED)
    status_key = keys.task_status(ENT, JOB, 0)
    before = await store.get(status_key)
    assert before is not None

    second = await start_agent()
    failed = await wait_status(store, 1, 1, TaskState.FAILED)
    assert failed.exit_code == -9
    await wait_status(store, 2, 1, TaskState.KILLED)
    await wait_gone(pids[2])

    # Task 0 was adopted as it was: same process, no new attempt, status left alone. No wait is
    # needed: task 2's end can only be reported in a pass after the one that stopped it, and
    # every pass observes task 0 and starts whatever the agent would start.
    assert start_ticks(pids[0]) is not None
    assert WorkDir(work_dir).attempts(TaskRef(ENT, JOB, 0)) == [1]
    after = await store.get(status_key)
    assert after is not None
    assert after.mod_revision == before.mod_revision
    text = await wait_log(second.address, 0, "TETHER_TASK_ATTEMPT=1")
    assert text.count("TETHER_TASK_ID") == 1  # started once

    # And the adopted task is still under control.
    await unassign(store, machine, 0)
    await wait_status(store, 0, 1, TaskState.KILLED)
    await wait_gone(pids[0])


async def test_exits_and_bad_assignments(
    store: Store, start_agent: StartAgent, machine: Machine
) -> None:
    agent = await start_agent()
    # Garbage under the machine's prefix is logged and skipped.
    await store.put(keys.assignment(machine.id, ENT, "broken", 0), b"{not json")
    await store.put(keys.assignments_of(machine.id) + "not/a/key/at/all", b"{}")
    await assign(store, machine, 0, attempt=1, script="print('bye')")
    await assign(store, machine, 1, attempt=1, script="import sys; sys.exit(7)")
    await assign(store, machine, 2, attempt=1, command="/nonexistent/tether-command")

    exited = await wait_status(store, 0, 1, TaskState.EXITED)
    assert exited.exit_code == 0
    assert (await wait_status(store, 1, 1, TaskState.FAILED)).exit_code == 7
    missing = await wait_status(store, 2, 1, TaskState.FAILED)
    assert missing.exit_code == 127
    assert "cannot start" in missing.message
    assert "bye" in (await fetch_log(agent.address, 0)).text

    # A stopped assignment that never ran here is reported killed, so it can be cleaned up.
    await assign(store, machine, 3, attempt=1, desired=DesiredState.STOPPED)
    never = await wait_status(store, 3, 1, TaskState.KILLED)
    assert never.pid is None
    # An older attempt never overwrites a newer attempt's status. Task 4, in the same write, is
    # the barrier: the agent handles every assignment it knows in each pass.
    await store.txn(
        [],
        [
            assignment_put(machine, 0, attempt=0),
            assignment_put(machine, 4, attempt=1, desired=DesiredState.STOPPED),
        ],
    )
    await wait_status(store, 4, 1, TaskState.KILLED)
    assert (await wait_status(store, 0, 1, TaskState.EXITED)).exit_code == 0
