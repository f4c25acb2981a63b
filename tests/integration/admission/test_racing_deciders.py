"""Two admission deciders racing in separate processes on etcd never admit beyond a quota: the
tree's quota ledger, compared by every admission, is what keeps them honest."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from pathlib import Path

from tests.integration.scheduler.helpers import TASK_CPU, make_job, put, submit
from tests.support.admission_worker import start_decider
from tests.support.quota_audit import reservation_history
from tests.support.region import create_region
from tether.model import Entitlement, Job, Quota, Resources, from_json
from tether.model.admission import Admission, AdmissionState
from tether.store import Store, keys, open_store
from tether.store.etcd_server import EtcdServer

REPO = Path(__file__).resolve().parents[3]
SHARD = "shard-0"
MEMORY = 1 << 20
"""Plenty: the tree is short of cpu only."""


def org_of_two_teams(team_tasks: int) -> list[Entitlement]:
    """An org with room for two teams' worth of tasks, and two teams ("red", "blue") that each
    have room for `team_tasks` and may borrow as much again from the other."""
    team = Resources(cpu=team_tasks * TASK_CPU, memory_mib=MEMORY // 2)
    return [
        Entitlement(name="org", quota=Quota(resources=team + team)),
        *(
            Entitlement(
                name=name,
                parent="org",
                quota=Quota(resources=team),
                borrowing_limit=Resources(cpu=team_tasks * TASK_CPU),
            )
            for name in ("red", "blue")
        ),
    ]


TREE = org_of_two_teams(5)


async def create_tree(store: Store, tree: list[Entitlement]) -> None:
    """A region of one shard holding the tree."""
    await create_region(store, [SHARD])
    for entitlement in tree:
        await put(store, keys.entitlement(entitlement.name), entitlement)
        await store.put(keys.shard_assignment(entitlement.name), SHARD.encode())


async def test_racing_deciders_in_two_processes_never_admit_beyond_a_quota(
    etcd_server: EtcdServer,
) -> None:
    url = etcd_server.url
    async with open_store(url) as store:
        await create_tree(store, TREE)
        start = await store.revision()
        workers = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.support.admission_worker",
                url,
                SHARD,
                name,
                str(pause_s),
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for name, pause_s in (("one", 0.05), ("two", 0.12))
        ]
        for worker in workers:
            assert worker.stdout is not None
            ready = await asyncio.wait_for(worker.stdout.readline(), 30)
            assert ready == b"ready\n", ready
        # Jobs arrive, and admitted ones end, while both decide.
        chance = random.Random(19)
        live: list[Job] = []
        for index in range(60):
            team = chance.choice(["red", "blue"])
            job = make_job(team, f"j{index}", chance.randint(1, 4))
            await submit(store, job)
            live.append(job)
            if index % 3 == 2:
                await asyncio.sleep(0.05)
                ended = chance.choice(live)
                live.remove(ended)
                gone = ended.model_copy(update={"deleting": True})
                await put(store, keys.job(ended.spec.entitlement, ended.spec.name), gone)
        await asyncio.sleep(1.0)
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.close()
        lost = 0
        for worker in workers:
            out, err = await asyncio.wait_for(worker.communicate(), 30)
            assert worker.returncode == 0, err.decode()
            lost += int(out.split()[-1])
        end = await store.revision()
        writers, peak = await replay(store, start, end)
    # They raced (writes were refused), a team borrowed, and no quota was ever exceeded.
    assert lost > 0
    assert writers
    assert peak > 5


async def replay(store: Store, start: int, end: int) -> tuple[set[str], int]:
    """Replays every revision of jobs and admissions from `start` to `end`, checking after each
    that no entitlement of the tree reserves beyond its quota; returns which deciders wrote the
    ledger, and the most tasks the tree reserved at any revision."""
    writers: set[str] = set()
    peak = 0
    async for revision, events, reservations in reservation_history(store, start, end):
        writers |= {
            event.kv.value.decode().split(":")[0]
            for event in events
            if event.kv.key.startswith(keys.QUOTA_LEDGERS)
        }
        assert not reservations.over_quota(TREE), f"at revision {revision}"
        peak = max(peak, reservations.tasks())
    return writers, peak


async def test_a_stalled_decider_cannot_admit_on_a_view_the_ledger_moved_past(
    etcd_server: EtcdServer,
) -> None:
    """The race the ledger is for: a decider that decided before a job arrived writes after
    another admitted that job, on records the other did not touch."""
    async with open_store(etcd_server.url) as store, open_store(etcd_server.url) as other:
        await create_tree(store, org_of_two_teams(2))
        fast_state, fast = await start_decider(store, SHARD, "fast", 0.0)
        slow_state, slow = await start_decider(other, SHARD, "slow", 0.0)
        slow.hold = asyncio.Event()
        try:
            for name, team in (("r1", "red"), ("b1", "blue")):
                await submit(store, make_job(team, name, 2))
            await fast.decide_once()
            await submit(store, make_job("blue", "b2", 2))
            await fast.decide_once()
            b2 = await admission(store, "blue/b2")
            assert b2.state is AdmissionState.QUEUED
            # r1 ends: room for 2 tasks. The slow decider sees b2 as the only one waiting, and
            # admits it (blue borrows red's idle quota); it writes once the test lets it.
            r1 = await read_job(store, "red/r1")
            await put(store, keys.job("red", "r1"), r1.model_copy(update={"deleting": True}))
            revision = await store.revision()
            for state in (fast_state, slow_state):
                await state.jobs.mirror.wait_for(revision)
            stalled = asyncio.create_task(slow.decide_once())
            await asyncio.wait_for(slow.decided.wait(), 10)
            # Meanwhile r2 arrives, and the fast decider admits it within red's guarantee;
            # b2's reason is unchanged, so its record is not written.
            await submit(store, make_job("red", "r2", 2))
            revision = await store.revision()
            await fast_state.jobs.mirror.wait_for(revision)
            await fast.decide_once()
            slow.hold.set()
            await stalled
            r2, b2 = await admission(store, "red/r2"), await admission(store, "blue/b2")
            assert (r2.state, r2.admitted) == (AdmissionState.ADMITTED, 2)
            assert (b2.state, b2.admitted) == (AdmissionState.QUEUED, 0)
        finally:
            await fast_state.stop()
            await slow_state.stop()


async def admission(store: Store, handle: str) -> Admission:
    entitlement, name = handle.split("/")
    kv = await store.get(keys.admission(entitlement, name))
    assert kv is not None
    return from_json(Admission, kv.value, stored=True)


async def read_job(store: Store, handle: str) -> Job:
    entitlement, name = handle.split("/")
    kv = await store.get(keys.job(entitlement, name))
    assert kv is not None
    return from_json(Job, kv.value, stored=True)
