"""The agent against a real store, with real shims, tasks, signals and HTTP on loopback."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx

from tests.integration.agent.helpers import (
    ENT,
    HANDLE,
    JOB,
    StartAgent,
    assign,
    assignment_put,
    environ,
    fetch_log,
    proc_file,
    read_status,
    stop,
    task_put,
    unassign,
    wait_gone,
    wait_log,
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
from tether.agent.workdir import TaskRef, WorkDir
from tether.model import AgentHeartbeat, DesiredState, Machine, TaskState, from_json
from tether.store import Store, keys


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


COUNT_STEPS = (
    "import os, time\n"
    "steps = float(os.environ['TETHER_PROGRESS'])\n"
    "path = os.environ['TETHER_PROGRESS_FILE']\n"
    "while True:\n"
    "    steps += 1\n"
    "    with open(path + '.new', 'w') as out:\n"
    "        out.write(str(steps))\n"
    "    os.replace(path + '.new', path)\n"
    "    time.sleep(0.1)\n"
)


async def test_a_task_reports_its_steps_and_resumes_from_those_of_its_last_attempt(
    store: Store, start_agent: StartAgent, machine: Machine
) -> None:
    await start_agent(progress_interval_s=1.0)
    # Task 0 counts on from the 100 steps its earlier attempts reported.
    await assign(store, machine, 0, attempt=1, script=COUNT_STEPS, progress=100)
    counting = await eventually(
        lambda: read_status(store, 0),
        lambda seen: seen is not None and (seen.progress or 0) > 102,
        timeout_s=20,
        what="task 0 to report steps past 100",
    )
    assert counting is not None
    assert counting.state is TaskState.RUNNING
    # Stopped (preempted, say), its last report carries the steps it got to.
    await assign(store, machine, 0, attempt=1, script=COUNT_STEPS, desired=DesiredState.STOPPED)
    killed = await wait_status(store, 0, 1, TaskState.KILLED)
    assert killed.progress is not None
    assert killed.progress >= (counting.progress or 0)
    # A task that writes no progress file reports the steps it resumed from.
    await assign(store, machine, 1, attempt=1, progress=7)
    quiet = await wait_status(store, 1, 1, TaskState.RUNNING)
    assert quiet.progress == 7
    assert environ(quiet.pid or 0)["TETHER_PROGRESS"] == "7"


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


async def test_an_attempt_whose_shim_never_started_is_started_again_not_failed(
    store: Store, start_agent: StartAgent, machine: Machine, work_dir: Path
) -> None:
    # A previous agent made the attempt's directory and died before the shim's first step (the
    # shim records its state before it starts anything): nothing ran. Once the shim's start
    # grace has passed, the attempt is forgotten and started afresh, not reported failed.
    WorkDir(work_dir).attempt(TaskRef(ENT, JOB, 0), 1).dir.mkdir(parents=True)
    await assign(store, machine, 0, attempt=1)
    agent = await start_agent()
    running = await wait_status(store, 0, 1, TaskState.RUNNING)
    assert running.pid is not None
    assert start_ticks(running.pid) is not None
    text = await wait_log(agent.address, 0, "TETHER_TASK_ATTEMPT=1")
    assert text.count("TETHER_TASK_ID") == 1  # started once


async def test_exits_and_bad_assignments(
    store: Store, start_agent: StartAgent, machine: Machine, work_dir: Path
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
            task_put(machine, 0, attempt=0),
            assignment_put(machine, 0, attempt=0),
            task_put(machine, 4, attempt=1),
            assignment_put(machine, 4, attempt=1, desired=DesiredState.STOPPED),
        ],
    )
    await wait_status(store, 4, 1, TaskState.KILLED)
    assert (await wait_status(store, 0, 1, TaskState.EXITED)).exit_code == 0

    # An assignment whose task the scheduler has deleted meanwhile (the job was deleted just
    # after the task was placed) is not started, and leaves no status behind. Task 6, in the
    # same write, is the barrier.
    await store.txn(
        [],
        [
            assignment_put(machine, 5, attempt=1),
            task_put(machine, 6, attempt=1),
            assignment_put(machine, 6, attempt=1),
        ],
    )
    await wait_status(store, 6, 1, TaskState.RUNNING)
    assert await read_status(store, 5) is None
    assert not (WorkDir(work_dir).sandbox(TaskRef(ENT, JOB, 5))).exists()
