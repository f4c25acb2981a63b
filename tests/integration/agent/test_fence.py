"""At-most-once tasks on a real agent and real shims: the fence the agent renews with its lease,
what a restarted agent takes up again, and one attempt at a time per task."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from tests.integration.agent.helpers import (
    ENT,
    FENCING_S,
    HANDLE,
    JOB,
    StartAgent,
    assign,
    stop,
    unassign,
    wait_gone,
    wait_status,
)
from tests.integration.agent.helpers import (
    machine as machine,
)
from tests.integration.agent.helpers import (
    region_config as region_config,
)
from tests.integration.agent.helpers import (
    start_agent as start_agent,
)
from tests.integration.agent.helpers import (
    work_dir as work_dir,
)
from tests.support.waiting import eventually
from tether.agent.procfs import start_ticks
from tether.agent.workdir import Fence, ShimExit, TaskRef, WorkDir, read_record
from tether.model import Machine, TaskState
from tether.store import Store

TRAP_TERM_THEN_EXIT = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.5), sys.exit(0)))\n"
    "time.sleep(120)\n"
)
"""A task that takes half a second to stop: a second attempt started at once would overlap."""


async def fence_beyond(work_dir: Path, moment: float) -> Fence:
    """The fence once the agent has renewed it past `moment` (monotonic)."""

    async def read() -> Fence | None:
        return read_record(Fence, WorkDir(work_dir).fence)

    fence = await eventually(
        read,
        lambda seen: seen is not None and seen.valid_until > moment,
        timeout_s=FENCING_S * 3,
        what=f"the fence renewed past {moment:.1f}",
    )
    assert fence is not None
    return fence


async def test_the_fence_follows_the_lease_and_a_restarted_agent_takes_its_tasks_up_again(
    store: Store, start_agent: StartAgent, machine: Machine, work_dir: Path
) -> None:
    first = await start_agent()
    await assign(store, machine, 0, attempt=1, at_most_once=True)
    await assign(store, machine, 1, attempt=1, at_most_once=True)
    await assign(store, machine, 2, attempt=1)
    pids = [(await wait_status(store, i, 1, TaskState.RUNNING)).pid or 0 for i in range(3)]
    # Renewals keep the tasks running past the fencing period they started with.
    started = time.monotonic()
    fence = await fence_beyond(work_dir, started + FENCING_S + 1)
    assert fence.attempts == [f"{HANDLE}/0@1", f"{HANDLE}/1@1"]
    assert time.monotonic() > started + 1
    assert all(start_ticks(pid) is not None for pid in pids)

    # The agent stops (as a crash would: nothing renews the fence). Meanwhile task 1 is taken
    # away; a new agent comes back within the fencing period.
    await stop(first)
    deadline = fence.valid_until
    await unassign(store, machine, 1)
    await start_agent()
    taken_up = await fence_beyond(work_dir, deadline)
    assert taken_up.attempts == [f"{HANDLE}/0@1"]
    # Task 0 is still assigned: the new agent held it before the old fence ran out.
    assert start_ticks(pids[0]) is not None
    # Task 1 was not: its shim killed it when the new fence left it out, or the agent did.
    await wait_gone(pids[1])
    # An ordinary task is never fenced.
    assert start_ticks(pids[2]) is not None


async def test_an_agent_cut_off_from_its_lease_has_its_at_most_once_tasks_killed(
    store: Store, start_agent: StartAgent, machine: Machine, work_dir: Path
) -> None:
    agent = await start_agent()
    await assign(store, machine, 0, attempt=1, at_most_once=True)
    await assign(store, machine, 1, attempt=1)
    fenced = (await wait_status(store, 0, 1, TaskState.RUNNING)).pid or 0
    ordinary = (await wait_status(store, 1, 1, TaskState.RUNNING)).pid or 0
    await stop(agent)
    stopped_at = time.monotonic()
    # Nothing renews the fence any more: its deadline is the last renewal's plus the fencing
    # period, a renewal sent before the agent stopped.
    fence = read_record(Fence, WorkDir(work_dir).fence)
    assert fence is not None
    assert fence.attempts == [f"{HANDLE}/0@1"]
    assert fence.valid_until <= stopped_at + FENCING_S
    await wait_gone(fenced)
    # Not before the fence's deadline (the shim and the test read the same monotonic clock).
    assert time.monotonic() >= fence.valid_until
    # The process is gone once killed (a zombie counts); the shim records the end after it
    # has reaped it.
    exit_file = WorkDir(work_dir).attempt(TaskRef(ENT, JOB, 0), 1).exit

    async def recorded_end() -> ShimExit | None:
        return read_record(ShimExit, exit_file)

    end = await eventually(recorded_end, bool, timeout_s=5, what="the shim to record the end")
    assert end is not None
    assert end.message.startswith("fenced: the agent's lease went unrenewed")
    assert start_ticks(ordinary) is not None

    # The next agent reports the fenced attempt killed.
    await start_agent()
    killed = await wait_status(store, 0, 1, TaskState.KILLED)
    assert killed.message.startswith("fenced:")


async def test_a_new_attempt_starts_only_once_the_old_one_has_ended(
    store: Store, start_agent: StartAgent, machine: Machine, work_dir: Path
) -> None:
    await start_agent()
    await assign(store, machine, 0, attempt=1, script=TRAP_TERM_THEN_EXIT, at_most_once=True)
    old = await wait_status(store, 0, 1, TaskState.RUNNING)
    await assign(store, machine, 0, attempt=2, at_most_once=True)
    new = await wait_status(store, 0, 2, TaskState.RUNNING)
    assert old.pid is not None
    assert start_ticks(old.pid) is None
    old_end = read_record(ShimExit, WorkDir(work_dir).attempt(TaskRef(ENT, JOB, 0), 1).exit)
    assert isinstance(new.started_at, datetime)
    assert old_end is not None
    assert new.started_at >= old_end.finished_at
