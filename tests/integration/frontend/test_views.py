"""Read-only views over real HTTP: tasks with effective states, machines, the region."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.frontend.conftest import ADMIN, ALICE, MALLORY, SHARDS, Region, job_spec
from tests.integration.frontend.problems import assert_problem
from tests.support.allocations import put_allocation
from tether.model import (
    AgentHeartbeat,
    Allocation,
    AllocatorEndpoint,
    DesiredState,
    Machine,
    MachineState,
    Resources,
    ShardLeader,
    Task,
    TaskState,
    TaskStatus,
    Topology,
    to_json,
)
from tether.store import Store, keys

NOW = datetime.now(UTC)


def machine(
    machine_id: str, state: MachineState = MachineState.UP, host_profile: str | None = None
) -> Machine:
    return Machine(
        id=machine_id,
        hostname=f"{machine_id}.example",
        topology=Topology(region="test", dc="dc1", msb="msb1", rack="r1"),
        hardware_type="std",
        capacity=Resources(cpu=8000, memory_mib=16384),
        attributes={"gpu_type": "v100"} if machine_id == "m1" else {},
        host_profile_current=host_profile,
        state=state,
    )


async def seed_tasks(store: Store) -> None:
    """team-a/web's tasks: 0 running (per its status), 1 pending, 2 placed with a stale
    status of an older attempt, 10 failed on m2."""
    tasks = [
        Task(job="team-a/web", index=0, generation=1, attempt=1, machine="m1",
             state=TaskState.PLACED, version="1.0", updated_at=NOW),
        Task(job="team-a/web", index=1, generation=1, version="1.0", updated_at=NOW,
             message="no machine has 1000 millicores free"),
        Task(job="team-a/web", index=2, generation=1, attempt=2, machine="m1", restarts=1,
             state=TaskState.PLACED, version="1.0", updated_at=NOW),
        Task(job="team-a/web", index=10, generation=1, attempt=1, machine="m2",
             state=TaskState.PLACED, desired=DesiredState.STOPPED, version="1.0",
             updated_at=NOW),
    ]  # fmt: skip
    later = NOW + timedelta(seconds=5)
    statuses = [
        TaskStatus(job="team-a/web", index=0, machine="m1", attempt=1,
                   state=TaskState.RUNNING, pid=4242, started_at=later, updated_at=later,
                   progress=1234.5),
        TaskStatus(job="team-a/web", index=2, machine="m1", attempt=1, state=TaskState.EXITED,
                   pid=17, exit_code=0, started_at=NOW, finished_at=NOW, updated_at=NOW,
                   progress=50),
        TaskStatus(job="team-a/web", index=10, machine="m2", attempt=1, state=TaskState.FAILED,
                   pid=99, exit_code=-9, message="killed by signal 9", updated_at=later),
    ]  # fmt: skip
    for task in tasks:
        await store.put(keys.task("team-a", "web", task.index), to_json(task))
    for status in statuses:
        await store.put(keys.task_status("team-a", "web", status.index), to_json(status))


async def test_tasks_show_effective_states(region: Region) -> None:
    assert (await region.api.post("/v1/jobs", headers=ALICE, json=job_spec())).is_success
    await seed_tasks(region.store)

    listed = await region.api.get("/v1/jobs/team-a/web/tasks", headers=ALICE)
    assert listed.status_code == 200
    tasks = listed.json()["tasks"]
    assert [task["index"] for task in tasks] == [0, 1, 2, 10]
    running, pending, placed, failed = tasks
    assert running == {
        "task_id": "team-a/web/0",
        "index": 0,
        "state": "running",
        "desired": "running",
        "machine": "m1",
        "attempt": 1,
        "restarts": 0,
        "generation": 1,
        "version": "1.0",
        "pid": 4242,
        "exit_code": None,
        "message": "",
        "started_at": running["started_at"],
        "updated_at": running["started_at"],
        "progress": 1234.5,
    }
    assert running["started_at"] is not None
    assert (pending["state"], pending["machine"], pending["pid"]) == ("pending", None, None)
    assert pending["message"] == "no machine has 1000 millicores free"
    # The status is about attempt 1; the task is at attempt 2, so its own state shows.
    assert (placed["state"], placed["pid"], placed["exit_code"]) == ("placed", None, None)
    assert (placed["restarts"], placed["attempt"]) == (1, 2)
    # Until attempt 2 reports, its progress is what attempt 1 reported: where it resumed.
    assert placed["progress"] == 50
    assert (failed["state"], failed["desired"], failed["exit_code"]) == ("failed", "stopped", -9)
    assert failed["message"] == "killed by signal 9"

    job = (await region.api.get("/v1/jobs/team-a/web", headers=ALICE)).json()
    assert job["running"] == 1
    assert job["progress"] is None  # task 1 reported none
    assert job["tasks"] == {
        "pending": 1,
        "placed": 1,
        "starting": 0,
        "running": 1,
        "exited": 0,
        "failed": 1,
        "lost": 0,
        "killed": 0,
    }
    listed_jobs = (await region.api.get("/v1/jobs", headers=ALICE)).json()["jobs"]
    assert listed_jobs[0]["tasks"] == job["tasks"]
    filtered = await region.api.get("/v1/jobs?entitlement=team-a", headers=ALICE)
    assert filtered.json()["jobs"][0]["tasks"] == job["tasks"]
    assert_problem(await region.api.get("/v1/jobs/team-a/nope/tasks", headers=ALICE), 404)


async def test_machines_show_resources_owner_and_host_profiles(region: Region) -> None:
    store = region.store
    # m1 still carries profile batch while its allocation record asks for web.
    await store.put(keys.machine("m1"), to_json(machine("m1", host_profile="batch")))
    await store.put(keys.machine("m2"), to_json(machine("m2")))
    tasks = {f"team-a/web/{index}": Resources(cpu=1000, memory_mib=512) for index in (0, 1)}
    owned = Allocation(machine="m1", entitlement="team-a", host_profile="web")
    await put_allocation(store, owned, tasks)
    await put_allocation(store, Allocation(machine="m2"))
    heartbeat = AgentHeartbeat(
        machine=machine("m1"), address="http://127.0.0.1:1", pid=1, started_at=NOW
    )
    await store.put(keys.heartbeat("m1"), to_json(heartbeat))

    answer = await region.api.get("/v1/machines", headers=MALLORY)
    assert answer.status_code == 200
    m1, m2 = answer.json()["machines"]
    zero = {"cpu": 0, "memory_mib": 0, "disk_gib": 0, "gpus": 0, "extra": {}}
    assert m1 == {
        "id": "m1",
        "hostname": "m1.example",
        "topology": {"region": "test", "dc": "dc1", "msb": "msb1", "rack": "r1"},
        "hardware_type": "std",
        "attributes": {"gpu_type": "v100"},
        "state": "up",
        "entitlement": "team-a",
        "host_profile": "web",
        "host_profile_current": "batch",
        "capacity": zero | {"cpu": 8000, "memory_mib": 16384},
        "allocated": zero | {"cpu": 2000, "memory_mib": 1024},
        "free": zero | {"cpu": 6000, "memory_mib": 15360},
        "tasks": 2,
        "heartbeat": True,
    }
    assert (m2["id"], m2["tasks"], m2["heartbeat"], m2["attributes"]) == ("m2", 0, False, {})
    assert (m2["entitlement"], m2["host_profile"], m2["host_profile_current"]) == (None, None, None)
    assert m2["free"] == m2["capacity"]
    assert_problem(await region.api.get("/v1/machines"), 401)


async def test_region_view(region: Region) -> None:
    store = region.store
    assert (await region.api.post("/v1/jobs", headers=ALICE, json=job_spec())).is_success
    await seed_tasks(store)
    leader = ShardLeader(shard="shard-0", identity="host:1:abc", pid=1, since=NOW)
    await store.put(keys.shard_leader("shard-0"), to_json(leader))
    allocator = AllocatorEndpoint(id="allocator-0", address="127.0.0.1:9", pid=2, since=NOW)
    await store.put(keys.allocator("allocator-0"), to_json(allocator))
    await store.put(keys.machine("m1"), to_json(machine("m1")))
    await store.put(keys.machine("m2"), to_json(machine("m2", MachineState.DOWN)))
    await store.put(keys.machine("m3"), to_json(machine("m3", MachineState.DECOMMISSIONED)))

    answer = await region.api.get("/v1/region", headers=ALICE)
    assert answer.status_code == 200
    view = answer.json()
    assert view["name"] == "test"
    assert [shard["shard"] for shard in view["shards"]] == SHARDS
    shard0, shard1 = view["shards"]
    assert shard0["leader"] == "host:1:abc"
    assert datetime.fromisoformat(shard0["leader_since"]) == NOW
    assert shard0["entitlements"] == ["team-a", "team-b"]
    assert shard1 == {"shard": "shard-1", "leader": None, "leader_since": None, "entitlements": []}
    assert [endpoint["id"] for endpoint in view["allocators"]] == ["allocator-0"]
    assert view["allocators"][0]["address"] == "127.0.0.1:9"
    assert view["machines"] == {
        "total": 3,
        "up": 1,
        "draining": 0,
        "maintenance": 0,
        "down": 1,
        "decommissioned": 1,
    }
    assert view["jobs"] == 1
    assert view["tasks"]["running"] == 1
    assert view["tasks"]["pending"] == 1
    assert sum(view["tasks"].values()) == 4
    assert (await region.api.get("/v1/region", headers=ADMIN)).json()["jobs"] == 1


async def test_an_invalid_stored_record_is_a_500_naming_it(region: Region) -> None:
    await region.store.put(keys.machine("m1"), b'{"id": "m1"}')
    answer = await region.api.get("/v1/machines", headers=ALICE)
    problem = assert_problem(answer, 500, keys.machine("m1"), "not a valid Machine")
    assert problem["type"] == "urn:tether:problem:corrupt-record"
    entry = keys.allocation_entry("m2", "team-a", "web", 0)
    await region.store.put(entry, b'{"cpu": "lots"}')
    answer = await region.api.get("/v1/entitlements/team-a", headers=ALICE)
    assert_problem(answer, 500, entry, "not a valid Resources")
