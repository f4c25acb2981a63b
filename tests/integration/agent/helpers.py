"""What the agent's integration tests share: fixtures (a fresh machine, its work dir, agents started
on them; test modules import them by name), assignments, statuses, processes and logs."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from tests.support.region import create_region
from tests.support.waiting import eventually
from tether.agent.cleanup import kill_now
from tether.agent.procfs import start_ticks
from tether.agent.service import Agent
from tether.agent.settings import AgentSettings
from tether.agent.workdir import ShimState, read_record
from tether.model import (
    AcceleratorSpec,
    Assignment,
    DesiredState,
    Machine,
    RegionConfig,
    Resources,
    Task,
    TaskState,
    TaskStatus,
    TaskTemplate,
    Topology,
    from_json,
    to_json,
)
from tether.store import Delete, Put, Store, keys, open_store

ENT, JOB = "ent", "job"
FENCING_S = 5.0
"""The region's fencing period: above the tests' agent lease TTL (2 s), as agents require, and
long enough that an agent started again on a loaded machine renews the fence in time."""
HANDLE = f"{ENT}/{JOB}"
CGROUP_ROOT = Path("/sys/fs/cgroup")
PRINT_ENV_AND_SLEEP = (
    "import os, time\n"
    "print(' '.join(f'{k}={v}' for k, v in sorted(os.environ.items()) if k.startswith('TETHER_')),"
    " flush=True)\n"
    "time.sleep(120)\n"
)


class StartAgent(Protocol):
    """Starts an agent of the test's machine on its work dir; `settings` override the tests'."""

    def __call__(self, **settings: Any) -> Awaitable[Agent]: ...


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


async def stop(agent: Agent) -> None:
    await agent.stop()


def assignment_put(
    machine: Machine,
    index: int,
    attempt: int,
    script: str = PRINT_ENV_AND_SLEEP,
    desired: DesiredState = DesiredState.RUNNING,
    command: str = sys.executable,
    at_most_once: bool = False,
    progress: float | None = None,
    accelerator: AcceleratorSpec | None = None,
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
        at_most_once=at_most_once,
        progress=progress,
        accelerator=accelerator,
    )
    return Put(keys.assignment(machine.id, ENT, JOB, index), to_json(assignment))


def task_put(machine: Machine, index: int, attempt: int) -> Put:
    """The write of the task's record, which the scheduler makes with every assignment: the
    agent reports a task's status only while the task exists."""
    task = Task(
        job=HANDLE,
        index=index,
        generation=1,
        attempt=attempt,
        machine=machine.id,
        state=TaskState.PLACED,
        version="1.0",
        updated_at=datetime.now(UTC),
    )
    return Put(keys.task(ENT, JOB, index), to_json(task))


async def assign(store: Store, machine: Machine, index: int, attempt: int, **fields: Any) -> None:
    """Writes the task's record and assignment; `fields` as `assignment_put` takes them."""
    await store.txn(
        [], [task_put(machine, index, attempt), assignment_put(machine, index, attempt, **fields)]
    )


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

    await eventually(ticks, lambda found: found is None, timeout_s=15, what=f"process {pid} to end")


async def fetch_log(address: str, index: int, **params: str | int) -> httpx.Response:
    # Generous: on two busy cores the agent, in this process, can answer seconds late.
    async with httpx.AsyncClient(base_url=address, timeout=30) as client:
        return await client.get(f"/v1/tasks/{ENT}/{JOB}/{index}/logs", params=params)


async def wait_log(address: str, index: int, needle: str) -> str:
    def shows_needle(response: httpx.Response) -> bool:
        assert response.status_code == 200, response.text
        return needle in response.text

    response = await eventually(
        lambda: fetch_log(address, index),
        shows_needle,
        timeout_s=30,
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
async def region_config(store_url: str) -> RegionConfig:
    """The region an agent needs in its store, as `tether up` makes it."""
    async with open_store(store_url) as store:
        return await create_region(store, fencing_s=FENCING_S)


@pytest.fixture
async def start_agent(
    store_url: str, work_dir: Path, machine: Machine, region_config: RegionConfig
) -> AsyncIterator[StartAgent]:
    """Starts agents of `machine` on `work_dir` (one at a time); stops them at the end."""
    running: list[Agent] = []

    async def start(**overrides: Any) -> Agent:
        fast = {"work_dir": work_dir, "lease_ttl_s": 2, "poll_interval_s": 0.1, "kill_grace_s": 1}
        settings = AgentSettings.model_validate(fast | overrides)
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
