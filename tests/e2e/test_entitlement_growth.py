"""A whole region as processes: an entitlement with a host profile grows from the free pool for a
job, its new machines switch profile before the tasks start, and go back to the pool when idle."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.allocations import Stored, read_allocations
from tests.support.harness import (
    LocalRegion,
    all_running,
    sleeper_job,
    submit,
    tasks_of,
    wait_for,
)
from tether.model import Allocation, HostProfile, Machine, from_json, to_json
from tether.store import keys, open_store

pytestmark = pytest.mark.timeout(120)

PROFILE = HostProfile(name="web", switch_seconds=1.0, settings={"hugepages": "2048"})
IDLE_RETURN_S = 1.0
# Each task takes most of a local agent's 4096 MiB: one task per machine.
TASK_MIB = 3072
TASKS = 3
SWITCHED = re.compile(rf"switched to host profile {PROFILE.name} in ([0-9.]+) s")
"""What an agent logs once a switch is over, with how long it took, hook included."""

# Appends "<epoch seconds> <machine> <profile> <settings>" to markers/<machine>.
HOOK = """#!/bin/sh
echo "$(date +%s.%N) $TETHER_MACHINE $TETHER_HOST_PROFILE $TETHER_HOST_PROFILE_SETTINGS" \\
    >> "{markers}/$TETHER_MACHINE"
"""


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    directory = tmp_path / "markers"
    directory.mkdir()
    return directory


@pytest.fixture
def region(tmp_path: Path, markers: Path) -> Iterator[LocalRegion]:
    hook = tmp_path / "profile-hook.sh"
    hook.write_text(HOOK.format(markers=markers))
    running = LocalRegion(
        tmp_path / "tether",
        extra_env={
            "TETHER_AGENT_PROFILE_HOOK": shlex.join(["/bin/sh", str(hook)]),
            "TETHER_ALLOCATOR_IDLE_RETURN_S": str(IDLE_RETURN_S),
            "TETHER_ALLOCATOR_IDLE_CHECK_S": "0.5",
        },
    )
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


def allocations(region: LocalRegion) -> dict[str, Stored]:
    async def read() -> dict[str, Stored]:
        async with open_store(region.store_url()) as store:
            return await read_allocations(store)

    return asyncio.run(read())


def record_of(stored: Stored) -> Allocation:
    """A machine's allocation record: one holding entries without it breaks the layout."""
    assert stored.record is not None, stored
    return stored.record


def machines(region: LocalRegion) -> dict[str, Machine]:
    async def read() -> dict[str, Machine]:
        async with open_store(region.store_url()) as store:
            found = await store.range(keys.MACHINES)
        return {
            keys.last_segment(kv.key): from_json(Machine, kv.value, stored=True) for kv in found.kvs
        }

    return asyncio.run(read())


def put_host_profile(region: LocalRegion) -> None:
    async def write() -> None:
        async with open_store(region.store_url()) as store:
            await store.put(keys.host_profile(PROFILE.name), to_json(PROFILE))

    asyncio.run(write())


def web_job() -> dict[str, Any]:
    spec = sleeper_job("front", TASKS, entitlement="web")
    spec["task"]["resources"] = {"cpu": 500, "memory_mib": TASK_MIB}
    return spec


def owned_by(region: LocalRegion, entitlement: str) -> set[str]:
    return {m for m, a in allocations(region).items() if record_of(a).entitlement == entitlement}


def test_entitlement_grows_switches_host_profile_and_returns_idle_machines(
    region: LocalRegion, markers: Path
) -> None:
    put_host_profile(region)
    started = allocations(region)
    assert len(started) == region.agents
    assert all(record_of(a).entitlement is None and not a.tasks for a in started.values()), started

    with region.client() as client:
        created = client.post(
            "/v1/entitlements",
            json={
                "name": "web",
                "host_profile": PROFILE.name,
                "quota": {"resources": {"cpu": 2000, "memory_mib": TASKS * TASK_MIB}},
            },
        )
        assert created.status_code == 201, created.text

        # Another entitlement takes one machine first: web must grow around it.
        plain = submit(client, sleeper_job("plain", 1))
        [plain_task] = wait_for(
            lambda: all_running(client, plain, 1), timeout_s=30, what="the plain task to run"
        )
        plain_machine = plain_task["machine"]
        assert owned_by(region, "default") == {plain_machine}
        assert owned_by(region, "web") == set()

        handle = submit(client, web_job())
        waiting_seen: set[str] = set()

        def running() -> list[dict[str, Any]] | None:
            tasks = tasks_of(client, handle)
            waiting_seen.update(
                t["message"] for t in tasks if "waiting for host profile" in t["message"]
            )
            return all_running(client, handle, TASKS)

        tasks = wait_for(running, timeout_s=40, what=f"{TASKS} web tasks to run", interval_s=0.1)
        web_machines = {t["machine"] for t in tasks}
        assert len(web_machines) == TASKS, "one task per machine"
        assert plain_machine not in web_machines

        # The entitlement owns exactly its tasks' machines, which carry its profile.
        records = allocations(region)
        assert owned_by(region, "web") == web_machines
        for machine_id in web_machines:
            record = record_of(records[machine_id])
            assert record.host_profile == PROFILE.name, record
            assert record.idle_since is None
        assert record_of(records[plain_machine]).entitlement == "default"
        assert record_of(records[plain_machine]).host_profile is None
        wait_for(
            lambda: all(
                machines(region)[m].host_profile_current == PROFILE.name for m in web_machines
            ),
            timeout_s=10,
            what="the web machines to announce host profile web",
        )
        assert machines(region)[plain_machine].host_profile_current is None

        # Each web agent ran the hook once, with the profile's settings; no other agent did.
        assert {path.name for path in markers.iterdir()} == web_machines
        for machine_id in web_machines:
            [mark] = (markers / machine_id).read_text().splitlines()
            marked_at, marked_machine, profile, settings = mark.split(" ", 3)
            assert (marked_machine, profile) == (machine_id, PROFILE.name)
            assert json.loads(settings) == PROFILE.settings
            switched = json.loads(
                (region.state_dir / "agents" / machine_id / "host-profile.json").read_text()
            )
            switched_at = datetime.fromisoformat(switched["switched_at"]).timestamp()
            assert switched["name"] == PROFILE.name
            # The switch lasted its switch_seconds, as the agent measured it from its start,
            # hook included; the hook ran before it ended, and the task started after.
            log = (region.state().logs / f"agent-{machine_id}.log").read_text()
            [took] = SWITCHED.findall(log)
            assert float(took) >= PROFILE.switch_seconds, (machine_id, took)
            assert float(marked_at) <= switched_at, (machine_id, mark, switched)
            [task] = [t for t in tasks if t["machine"] == machine_id]
            task_started = datetime.fromisoformat(task["started_at"]).timestamp()
            assert task_started >= switched_at, (machine_id, task, switched)
        print(f"messages seen while switching: {sorted(waiting_seen)}")

        # Deleted: the machines hold nothing, then go back to the free pool after the delay.
        assert client.delete(f"/v1/jobs/{handle}").status_code == 202
        wait_for(
            lambda: client.get(f"/v1/jobs/{handle}").status_code == 404,
            timeout_s=30,
            what="the web job to be deleted",
        )
        deleted_at = time.monotonic()

        def returned() -> dict[str, Stored] | None:
            records = allocations(region)
            free = all(record_of(records[m]).entitlement is None for m in web_machines)
            return records if free else None

        records = wait_for(
            returned, timeout_s=15, what="the web machines to return to the free pool"
        )
        print(f"returned to the pool {time.monotonic() - deleted_at:.1f} s after the deletion")
        for machine_id in web_machines:
            empty = Stored(Allocation(machine=machine_id))
            assert records[machine_id] == empty, records[machine_id]
        assert record_of(records[plain_machine]).entitlement == "default"
        assert len(records[plain_machine].tasks) == 1
        # Machines keep the profile they carry: nothing asks them to switch back.
        assert all(machines(region)[m].host_profile_current == PROFILE.name for m in web_machines)
