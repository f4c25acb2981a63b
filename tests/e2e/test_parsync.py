"""ParSync end to end, with `tether up`: both allocator replicas follow allocations/ by partitions
(stale between reads), two teams homed on different replicas take machines from the same free
pool at once, and no machine ever holds more than it has, or tasks of two entitlements: each
commit's compares guard it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.allocations import read_allocations
from tests.support.harness import LocalRegion, sleeper_job, tasks_of, wait_for
from tether.model import Resources
from tether.scheduler.allocator_client import replica_order
from tether.store import open_store

AGENT = Resources(cpu=4000, memory_mib=4096)
TASK_CPU = TASK_MIB = 900
"""Four tasks to a machine, whose entitlement takes it whole: of the 24 tasks, 12 to 16 run."""
JOBS, COUNT = 3, 4


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    running = LocalRegion(
        tmp_path_factory.mktemp("region") / "tether",
        extra_env={
            "TETHER_ALLOCATOR_SYNC": "parsync",
            "TETHER_ALLOCATOR_SYNC_PERIOD_S": "4",
            "TETHER_ALLOCATOR_SYNC_PARTITIONS": "2",
        },
    )
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


def teams_on_both_replicas() -> list[str]:
    """Two team names whose home allocator replicas differ."""
    replicas = ["allocator-0", "allocator-1"]
    by_home: dict[str, str] = {}
    for n in range(100):
        name = f"team-{n}"
        by_home.setdefault(replica_order(name, replicas)[0], name)
        if len(by_home) == 2:
            return sorted(by_home.values())
    raise AssertionError("no two names with different home replicas")


def job_spec(name: str, team: str) -> dict[str, Any]:
    spec = sleeper_job(name, COUNT, entitlement=team)
    spec["task"]["resources"] = {"cpu": TASK_CPU, "memory_mib": TASK_MIB}
    return spec


def test_two_stale_replicas_fill_the_same_machines_and_never_overcommit(
    region: LocalRegion,
) -> None:
    teams = teams_on_both_replicas()
    with region.client() as client:
        for team in teams:
            body = {
                "name": team,
                "quota": {"resources": {"cpu": 16_000, "memory_mib": 16_384}},
                "members": ["admin"],
            }
            created = client.post("/v1/entitlements", json=body)
            assert created.status_code == 201, created.text
        handles = []
        for number in range(JOBS):
            for team in teams:
                submitted = client.post("/v1/jobs", json=job_spec(f"fill-{number}", team))
                assert submitted.status_code == 201, submitted.text
                handles.append(f"{team}/fill-{number}")

        total = len(handles) * COUNT

        def settled() -> dict[str, int] | None:
            states: dict[str, int] = {}
            for handle in handles:
                for task in tasks_of(client, handle):
                    states[task["state"]] = states.get(task["state"], 0) + 1
            done = states.get("running", 0) + states.get("pending", 0) == total
            return states if done and states.get("running", 0) >= 12 else None

        # Four machines of 4 tasks each, owned whole by one team or the other.
        wait_for(settled, timeout_s=60, what="every task running or pending, 12 or more running")

    for replica in ("allocator-0", "allocator-1"):
        log = (region.state().logs / f"{replica}.log").read_text()
        assert "reads allocations/ in 2 partitions, one every 2.00 s (parsync)" in log
    allocations = asyncio.run(_read(region))
    assert len(allocations) == 4
    for machine_id, held in allocations.items():
        assert held.used().fits_in(AGENT), f"{machine_id} holds {held.used()}"
        owners = {task_id.split("/")[0] for task_id in held.tasks}
        assert held.record is not None
        assert owners <= {held.record.entitlement}, f"{machine_id}: tasks of {owners}"


async def _read(region: LocalRegion) -> dict[str, Any]:
    async with open_store(region.store_url()) as store:
        return await read_allocations(store)
