"""`kill -9` of each kind of service process while jobs are submitted, scaled and deleted.

One region on etcd for the module; each test kills one process, checks what must go on without
it, starts it again with the command `tether up` recorded (`tether up` does not restart
services: an operator does), and then checks the invariants that every test shares:

- every job the API accepted (a 2xx answer) exists with the count last accepted, all its tasks
  running, and every job whose deletion was accepted is gone, its processes too;
- no task index ever ran as two processes for longer than the fencing window, except on a
  machine whose agent died, whose processes its next agent kills;
- the long-running tasks kept their pids, except those whose own agent's machine died.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.support.churn import Churn
from tests.support.faults import (
    TaskProcess,
    machine_versions,
    pids_by_index,
    read_key,
    task_processes,
    write_key,
)
from tests.support.harness import (
    LocalRegion,
    all_running,
    get_json,
    machines_by_id,
    sleeper_job,
    submit,
    wait_for,
)
from tether.model import (
    Machine,
    MachineState,
    Resources,
    ShardLeader,
    Task,
    from_json,
    to_json,
)
from tether.region.supervisor import process_alive
from tether.scheduler.allocator_client import replica_order
from tether.store import KeyValue, keys, open_store
from tether.store.etcd_server import EtcdServer

pytestmark = pytest.mark.timeout(180)

FENCING_WINDOW_S = 3.0
"""How long a task index may run as two processes: an old attempt is stopped within the agent's
poll once its assignment is gone (a sleeper dies at SIGTERM), plus the time to notice."""
SECOND = "second"
"""An entitlement of its own, created by the module: a new one joins the least-loaded shard."""
PROBE = "probe"
"""The machine the health checker's test records without an agent, and removes again."""


class Watchdog(threading.Thread):
    """Samples the region's task processes until stopped.

    Records each task index that runs as two processes for longer than the fencing window;
    processes on an `excused` machine do not count.
    """

    def __init__(self, region: LocalRegion) -> None:
        super().__init__(name="watchdog", daemon=True)
        self._region = region
        self.excused: set[str] = set()
        self.twice: list[str] = []
        self.processes: list[TaskProcess] = []
        self._since: dict[str, float] = {}
        self._reported: set[str] = set()
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)

    def run(self) -> None:
        while not self._stopping.wait(0.25):
            self._sample()

    def _sample(self) -> None:
        now = time.monotonic()
        self.processes = task_processes(self._region.state_dir)
        by_task: dict[str, list[TaskProcess]] = {}
        for process in self.processes:
            if process.machine not in self.excused:
                by_task.setdefault(process.task_id, []).append(process)
        for task_id in list(self._since):
            if len(by_task.get(task_id, ())) < 2:
                del self._since[task_id]
        for task_id, processes in by_task.items():
            if len(processes) > 1:
                since = self._since.setdefault(task_id, now)
                if now - since > FENCING_WINDOW_S and task_id not in self._reported:
                    self._reported.add(task_id)
                    self.twice.append(f"{task_id} runs as {processes} for {now - since:.1f} s")


@dataclass
class Faults:
    """The module's region, its clients and background threads, and its long-running jobs."""

    region: LocalRegion
    client: httpx.Client
    churn: Churn
    watchdog: Watchdog
    steady: dict[str, dict[int, int | None]]
    """Long-running job -> its tasks' pids by index, updated when a machine dies."""
    machines: dict[str, int] = field(default_factory=dict)
    """Machine id -> version of its record before the kill."""

    def kill(self, name: str) -> datetime:
        """SIGKILLs service `name`; returns when it is dead, with the moment of the kill."""
        self.machines = machine_versions(self.region.store_url())
        pid = self.region.service_pids()[name]
        os.kill(pid, signal.SIGKILL)
        killed_at = datetime.now(UTC)
        wait_for(lambda: not process_alive(pid), timeout_s=10, what=f"{name} to die")
        return killed_at

    def restart(self, name: str) -> None:
        """Starts service `name` again as an operator would; returns once it has started."""
        log = self.region.state_dir / "logs" / f"{name}.log"
        before = log.stat().st_size
        self.region.restart(name)

        def started() -> bool:
            with log.open("rb") as opened:
                opened.seek(before)
                return b": started" in opened.read()

        wait_for(started, timeout_s=60, what=f"{name} to start again")

    def settle(self, *, machine_died: str | None = None) -> None:
        """The shared invariants, checked with the churn paused; no machine but `machine_died`
        changed state since the kill."""
        with self.churn.paused():
            self.churn.check(self.client)
            for handle, pids in self.steady.items():
                now = pids_by_index(self.client, handle)
                assert now == pids, f"the tasks of {handle} changed pids: {pids} -> {now}"
            deleted = {handle for handle, job in self.churn.accepted.items() if job.deleted}
            lingering = [
                process
                for process in task_processes(self.region.state_dir)
                if process.task_id.rsplit("/", 1)[0] in deleted
            ]
            assert lingering == [], "tasks of deleted jobs still run"
        assert self.watchdog.is_alive(), "the watchdog thread died"
        assert self.watchdog.twice == []
        versions = machine_versions(self.region.store_url())
        changed = {m for m, version in versions.items() if version != self.machines.get(m)}
        assert changed == ({machine_died} if machine_died else set())


def shard_of(region: LocalRegion, entitlement: str) -> str:
    kv = read_key(region.store_url(), keys.shard_assignment(entitlement))
    assert kv is not None, f"entitlement {entitlement} has no shard"
    return kv.value.decode()


@pytest.fixture(scope="module")
def etcd() -> Iterator[EtcdServer]:
    # Not `tether up --etcd`: the store must outlive `tether up`, so that the services the tests
    # started again (outside it) can stop cleanly after it.
    with EtcdServer(on_tmpfs=True) as server:
        yield server


@pytest.fixture(scope="module")
def faults(etcd: EtcdServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faults]:
    # Six machines: `default` spreads its tasks over the four MSBs and takes a machine in each,
    # which leaves two in the free pool for the second entitlement.
    region = LocalRegion(
        tmp_path_factory.mktemp("process-faults") / "tether",
        store_args=["--store", etcd.url],
        agents=6,
    )
    churn: Churn | None = None
    watchdog: Watchdog | None = None
    try:
        region.start()
        client = region.client()
        steady = {"default/steady": 4, f"{SECOND}/steady": 2}
        submit(client, sleeper_job("steady", 4))
        wait_for(lambda: all_running(client, "default/steady", 4), timeout_s=60, what="steady")
        # Created once `default` has machines and tasks: it joins the other, least-loaded shard.
        created = client.post(
            "/v1/entitlements",
            json={"name": SECOND, "quota": {"resources": {"cpu": 8000, "memory_mib": 8192}}},
        )
        assert created.status_code == 201, created.text
        assert shard_of(region, SECOND) != shard_of(region, "default")
        submit(client, sleeper_job("steady", 2, entitlement=SECOND))
        wait_for(
            lambda: all_running(client, f"{SECOND}/steady", 2), timeout_s=60, what="second steady"
        )
        churn = Churn([region.url], region.token, ["default", SECOND])
        watchdog = Watchdog(region)
        churn.start()
        watchdog.start()
        yield Faults(region, client, churn, watchdog, {h: pids_by_index(client, h) for h in steady})
    finally:
        if churn is not None:
            churn.stop()
        if watchdog is not None:
            watchdog.stop()
        region.cleanup()


def test_frontend(faults: Faults) -> None:
    churn = faults.churn
    retried = churn.retried
    faults.kill("frontend")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{faults.region.url}/readyz")
    wait_for(lambda: churn.retried > retried, timeout_s=10, what="a churn call to go unanswered")
    faults.restart("frontend")
    wait_for(
        lambda: faults.client.get("/readyz").status_code == 200,
        timeout_s=30,
        what="the frontend to be ready",
    )
    # The calls that went unanswered are sent again, and answered (settle() checks how).
    answered = churn.answered
    wait_for(lambda: churn.answered > answered + 2, timeout_s=30, what="churn answers")
    faults.settle()


@pytest.mark.parametrize("entitlement", ["default", SECOND])
def test_scheduler_leader(faults: Faults, entitlement: str) -> None:
    region = faults.region
    shard = shard_of(region, entitlement)
    leader = region.shard_leader(shard)
    assert leader is not None
    name = next(n for n, pid in region.service_pids().items() if pid == leader.pid)
    killed_at = faults.kill(name)

    def successor() -> ShardLeader | None:
        current = region.shard_leader(shard)
        return current if current is not None and current.pid != leader.pid else None

    # Within a lease and 2 s, by the successor's stamp of its win: this test's polling opens a
    # store connection per look and is slow on a loaded machine.
    new = wait_for(successor, timeout_s=20, what=f"a new leader of {shard}", interval_s=0.1)
    took = (new.since - killed_at).total_seconds()
    assert took <= 3 + 2, f"{shard}'s standby took {took:.1f} s to lead"
    # The new leader schedules: a job of the shard runs.
    handle = submit(faults.client, sleeper_job(f"after-{shard}", 1, entitlement=entitlement))
    wait_for(lambda: all_running(faults.client, handle, 1), timeout_s=30, what=handle)
    assert faults.client.delete(f"/v1/jobs/{handle}").status_code == 202
    faults.restart(name)
    faults.settle()


def test_scheduler_leader_killed_while_it_places_a_job(faults: Faults) -> None:
    """Killed as the job it places arrives (between the allocator's answer and the write of the
    tasks, or around it): the standby writes the tasks where the allocator put them, each once,
    and no task starts twice or again."""
    region, client = faults.region, faults.client
    shard = shard_of(region, "default")
    leader = region.shard_leader(shard)
    assert leader is not None
    name = next(n for n, pid in region.service_pids().items() if pid == leader.pid)
    count = 8
    handle = submit(client, sleeper_job("placed-by-two", count))
    faults.kill(name)
    wait_for(lambda: all_running(client, handle, count), timeout_s=30, what=handle)

    async def task_records() -> list[KeyValue]:
        async with open_store(region.store_url()) as store:
            return (await store.range(keys.tasks_of("default", "placed-by-two"))).kvs

    records = asyncio.run(task_records())
    assert len(records) == count
    # Written once each: placed as they were created, never placed again.
    assert {kv.version for kv in records} == {1}
    assert {from_json(Task, kv.value, stored=True).restarts for kv in records} == {0}
    assert client.delete(f"/v1/jobs/{handle}").status_code == 202
    faults.restart(name)
    faults.settle()


def test_allocator(faults: Faults) -> None:
    # The replica `default`'s placements go to first: they must go to the other one.
    home = replica_order("default", ["allocator-0", "allocator-1"])[0]
    faults.kill(home)
    handle = submit(faults.client, sleeper_job("without-home-allocator", 3))
    wait_for(lambda: all_running(faults.client, handle, 3), timeout_s=30, what=handle)
    assert faults.client.delete(f"/v1/jobs/{handle}").status_code == 202
    faults.restart(home)

    def registered() -> bool:
        replicas = get_json(faults.client, "/v1/region")["allocators"]
        return any(a["pid"] == faults.region.service_pids()[home] for a in replicas)

    wait_for(registered, timeout_s=15, what=f"the restarted {home} to register")
    faults.settle()


def test_broker(faults: Faults) -> None:
    faults.kill("broker-dc1")
    # Machines and placements do not need the broker, only new machines and maintenance do.
    handle = submit(faults.client, sleeper_job("without-broker", 2))
    wait_for(lambda: all_running(faults.client, handle, 2), timeout_s=30, what=handle)
    assert faults.client.delete(f"/v1/jobs/{handle}").status_code == 202
    faults.restart("broker-dc1")
    assert {m["state"] for m in machines_by_id(faults.client).values()} == {"up"}
    faults.settle()


def test_health_checker(faults: Faults) -> None:
    url = faults.region.store_url()
    faults.kill("health")
    # A machine that died while the checker was dead (a record without a heartbeat). It has
    # no capacity, so nothing is ever placed on it.
    template = read_key(url, keys.machine(next(iter(faults.machines))))
    assert template is not None
    probe = from_json(Machine, template.value, stored=True).model_copy(
        update={"id": PROBE, "hostname": f"{PROBE}.local", "capacity": Resources()}
    )
    write_key(url, keys.machine(PROBE), to_json(probe))
    try:
        faults.restart("health")

        def probe_down() -> bool:
            kv = read_key(url, keys.machine(PROBE))
            return kv is not None and (
                from_json(Machine, kv.value, stored=True).state is MachineState.DOWN
            )

        # The restarted checker still marks a dead machine down, once its grace period (counted
        # from its start) is over. A live machine it took for dead (its heartbeat unseen, say)
        # would have gone down in the same check, and settle() sees that only the probe's
        # record changed. (That the grace counts from the start: tests/integration/health.)
        wait_for(probe_down, timeout_s=15, what=f"the restarted checker to mark {PROBE} down")
        faults.settle(machine_died=PROBE)
    finally:
        write_key(url, keys.machine(PROBE), None)


def test_agent(faults: Faults) -> None:
    client, watchdog = faults.client, faults.watchdog
    victim = next(t for t in get_json(client, "/v1/jobs/default/steady/tasks")["tasks"])["machine"]
    orphans = {p.pid for p in task_processes(faults.region.state_dir) if p.machine == victim}
    assert orphans, f"no task process runs on {victim}"
    # Its processes outlive it, and run on after their tasks are replaced elsewhere, until its
    # next agent kills them: they are not counted twice meanwhile.
    watchdog.excused.add(victim)
    faults.kill(f"agent-{victim}")
    wait_for(
        lambda: machines_by_id(client)[victim]["state"] == "down",
        timeout_s=15,
        what=f"machine {victim} to be down",
    )
    for handle, pids in faults.steady.items():

        def moved(h: str = handle, count: int = len(pids)) -> list[dict[str, Any]] | None:
            tasks = all_running(client, h, count)
            return tasks if tasks and all(t["machine"] != victim for t in tasks) else None

        tasks = wait_for(moved, timeout_s=30, what=f"the tasks of {handle} to leave {victim}")
        now = {t["index"]: t["pid"] for t in tasks}
        kept = {i: pid for i, pid in pids.items() if pid not in orphans}
        assert {i: now[i] for i in kept} == kept
        faults.steady[handle] = now
    assert all(process_alive(pid) for pid in orphans)

    faults.restart(f"agent-{victim}")
    restarted_at = time.monotonic()
    wait_for(
        lambda: not any(process_alive(pid) for pid in orphans),
        timeout_s=15,
        what="the restarted agent to kill its stale tasks",
    )
    assert time.monotonic() - restarted_at < FENCING_WINDOW_S + 2
    watchdog.excused.discard(victim)
    wait_for(
        lambda: machines_by_id(client)[victim]["state"] == "up",
        timeout_s=15,
        what=f"machine {victim} to be up again",
    )
    faults.settle(machine_died=victim)
