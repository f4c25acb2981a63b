"""An agent process killed (SIGKILL) in the middle of a pass, between the transaction that claims
a batch of new tasks and the one that reports them running: its successor on the same work dir
reports every task running, each started exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.agent.helpers import ENT, JOB, assignment_put, environ, task_put
from tests.integration.agent.helpers import machine as machine
from tests.integration.agent.helpers import region_config as region_config
from tests.integration.agent.helpers import work_dir as work_dir
from tests.support.waiting import eventually
from tether.model import Machine, RegionConfig, TaskState, TaskStatus, from_json
from tether.store import Store, keys

TASKS = 24

pytestmark = pytest.mark.timeout(120)


def start_agent(store_url: str, machine: Machine, work_dir: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tether.cli.main", "agent", "--machine-id", machine.id]
    command += ["--work-dir", str(work_dir), "--cpu", "4000", "--memory-mib", "8192"]
    env = {**os.environ, "TETHER_STORE": store_url, "TETHER_AGENT_LEASE_TTL_S": "2"}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def statuses(store: Store) -> dict[int, TaskStatus]:
    listing = await store.range(keys.statuses_of(ENT, JOB))
    found = (from_json(TaskStatus, kv.value, stored=True) for kv in listing.kvs)
    return {status.index: status for status in found}


def task_processes(machine_id: str) -> Counter[str]:
    """The processes of this machine's tasks, counted by task id (a task's shell and what it
    runs share its environment, so only its session leader is counted)."""
    found: Counter[str] = Counter()
    for entry in os.listdir("/proc"):
        if not entry.isdecimal():
            continue
        pid = int(entry)
        try:
            env = environ(pid)
            leads = os.getsid(pid) == pid
        except (OSError, ValueError):
            continue
        if env.get("TETHER_MACHINE") == machine_id and "TETHER_TASK_ID" in env and leads:
            found[env["TETHER_TASK_ID"]] += 1
    return found


async def test_an_agent_killed_between_claiming_and_reporting_loses_no_status(
    store_url: str,
    store: Store,
    machine: Machine,
    work_dir: Path,
    region_config: RegionConfig,
) -> None:
    first = start_agent(store_url, machine, work_dir)
    second: subprocess.Popen[bytes] | None = None
    try:
        await eventually(
            lambda: store.get(keys.heartbeat(machine.id)),
            lambda heartbeat: heartbeat is not None,
            timeout_s=60,
            what="the agent's heartbeat",
        )
        await store.txn(
            [],
            [
                put
                for index in range(TASKS)
                for put in (
                    task_put(machine, index, 1),
                    assignment_put(machine, index, 1, command="/bin/sh", script="sleep 120"),
                )
            ],
        )
        # Killed as soon as its claims show: while it starts their processes.
        claimed = await eventually(
            lambda: statuses(store),
            lambda found: len(found) > 0,
            timeout_s=30,
            interval_s=0.005,
            what="the agent's claims",
        )
        first.send_signal(signal.SIGKILL)
        first.wait()
        at_kill = await statuses(store)
        assert {status.state for status in at_kill.values()} == {TaskState.STARTING}, (
            "the agent reported before it was killed: the test missed the middle of its pass",
            claimed,
        )

        second = start_agent(store_url, machine, work_dir)
        running = await eventually(
            lambda: statuses(store),
            lambda found: (
                len(found) == TASKS and all(s.state is TaskState.RUNNING for s in found.values())
            ),
            timeout_s=60,
            what="every task reported running by the next agent",
        )
        assert {status.attempt for status in running.values()} == {1}
        assert {status.machine for status in running.values()} == {machine.id}
        # Each task started once, whether the first agent started it or the second.
        started = task_processes(machine.id)
        assert started == Counter({f"{ENT}/{JOB}/{index}": 1 for index in range(TASKS)})
        assert all(os.getsid(status.pid or 0) == status.pid for status in running.values())
    finally:
        for agent in (first, second):
            if agent is not None and agent.poll() is None:
                agent.send_signal(signal.SIGKILL)
                agent.wait()
