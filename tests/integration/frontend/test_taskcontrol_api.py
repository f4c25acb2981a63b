"""The REST API of planned maintenance (operator role) and of restarts and moves on request,
on both store backends: what they store, and what they refuse without changing anything."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.frontend.conftest import ADMIN, ALICE, MALLORY, Region, job_spec
from tests.integration.frontend.problems import assert_problem
from tests.integration.frontend.test_views import machine, seed_tasks
from tether.model import (
    AdvanceNotice,
    ControlStatus,
    Machine,
    PrincipalRecord,
    Role,
    TaskOperation,
    Topology,
    from_json,
    to_json,
    token_digest,
)
from tether.store import keys

OPERATOR = {"Authorization": "Bearer operator-token"}


async def seed_machines(region: Region) -> None:
    """m1, m2 in dc1/msb1/r1; m3 in dc1/msb2/r1; and an operator."""
    for machine_id, msb in (("m1", "msb1"), ("m2", "msb1"), ("m3", "msb2")):
        placed = machine(machine_id).model_copy(
            update={"topology": Topology(region="test", dc="dc1", msb=msb, rack="r1")}
        )
        await region.store.put(keys.machine(machine_id), to_json(placed))
    await region.store.put(
        keys.principal(token_digest("operator-token")),
        to_json(PrincipalRecord(name="ops", roles=[Role.OPERATOR])),
    )


async def stored_notices(region: Region) -> list[AdvanceNotice]:
    kvs = (await region.store.range(keys.MAINTENANCE)).kvs
    return [from_json(AdvanceNotice, kv.value, stored=True) for kv in kvs]


async def test_an_operator_schedules_maintenance_of_an_msb(region: Region) -> None:
    await seed_machines(region)
    start = datetime.now(UTC) + timedelta(hours=2)
    body = {"msb": "dc1/msb1", "start": start.isoformat(), "duration_s": 1800, "kind": "reboot"}
    created = await region.api.post("/v1/maintenance", headers=OPERATOR, json=body)
    assert created.status_code == 201, created.text
    view = created.json()
    assert view["machines"] == ["m1", "m2"]
    assert view["phase"] == "scheduled"
    assert datetime.fromisoformat(view["end"]) == start + timedelta(seconds=1800)
    assert created.headers["location"] == f"/v1/maintenance/{view['id']}"
    [notice] = await stored_notices(region)
    assert (notice.id, notice.machines, notice.start) == (view["id"], ["m1", "m2"], start)

    # Everyone may see it; only operators may cancel it.
    listed = await region.api.get("/v1/maintenance", headers=ALICE)
    assert [m["id"] for m in listed.json()["maintenance"]] == [notice.id]
    shown = await region.api.get(f"/v1/maintenance/{notice.id}", headers=ALICE)
    assert shown.json()["kind"] == "reboot"
    refused = await region.api.delete(f"/v1/maintenance/{notice.id}", headers=ALICE)
    assert_problem(refused, 403, "alice", "not an operator")
    assert len(await stored_notices(region)) == 1
    cancelled = await region.api.delete(f"/v1/maintenance/{notice.id}", headers=ADMIN)
    assert cancelled.status_code == 200, cancelled.text
    assert await stored_notices(region) == []
    gone = await region.api.get(f"/v1/maintenance/{notice.id}", headers=ALICE)
    assert_problem(gone, 404, notice.id)


async def test_maintenance_of_a_rack_or_named_machines_starts_now_by_default(
    region: Region,
) -> None:
    await seed_machines(region)
    before = datetime.now(UTC)
    rack = await region.api.post(
        "/v1/maintenance",
        headers=OPERATOR,
        json={"rack": "dc1/msb2/r1", "duration_s": 60, "kind": "power", "reason": "PDU swap"},
    )
    assert rack.status_code == 201, rack.text
    assert rack.json()["machines"] == ["m3"]
    assert rack.json()["phase"] == "in-progress"
    assert datetime.fromisoformat(rack.json()["start"]) >= before
    named = await region.api.post(
        "/v1/maintenance",
        headers=OPERATOR,
        json={"machines": ["m2", "m1", "m2"], "duration_s": 60, "kind": "hardware"},
    )
    assert named.json()["machines"] == ["m2", "m1"]
    assert len(await stored_notices(region)) == 2


async def test_bad_maintenance_requests_are_refused_and_store_nothing(region: Region) -> None:
    await seed_machines(region)
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    cases = [
        (ALICE, {"machines": ["m1"], "duration_s": 60, "kind": "reboot"}, 403, "not an operator"),
        (OPERATOR, {"duration_s": 60, "kind": "reboot"}, 422, "exactly one of"),
        (
            OPERATOR,
            {"machines": ["m1"], "msb": "dc1/msb1", "duration_s": 60, "kind": "reboot"},
            422,
            "exactly one of",
        ),
        (OPERATOR, {"machines": ["m1", "m9"], "duration_s": 60, "kind": "reboot"}, 404, "m9"),
        (OPERATOR, {"msb": "dc1/msb7", "duration_s": 60, "kind": "reboot"}, 404, "dc1/msb7"),
        (OPERATOR, {"machines": ["m1"], "duration_s": 0, "kind": "reboot"}, 422, "duration_s"),
        (OPERATOR, {"machines": ["m1"], "duration_s": 60, "kind": "nap"}, 422, "kind"),
        (
            OPERATOR,
            {"machines": ["m1"], "duration_s": 60, "kind": "reboot", "start": "yesterday"},
            422,
            "start",
        ),
        (
            OPERATOR,
            {"machines": ["m1"], "duration_s": 60, "kind": "reboot", "start": "2020-01-01T00:00Z"},
            422,
            "in the past",
        ),
        (
            OPERATOR,
            {"machines": ["m1"], "start": soon, "duration_s": 60, "kind": "reboot", "x": 1},
            422,
            "x",
        ),
    ]
    for headers, body, status, fragment in cases:
        answer = await region.api.post("/v1/maintenance", headers=headers, json=body)
        assert_problem(answer, status, fragment)
    assert await stored_notices(region) == []
    unknown = await region.api.delete("/v1/maintenance/nope", headers=OPERATOR)
    assert_problem(unknown, 404, "nope")


async def submitted_with_tasks(region: Region) -> None:
    """team-a/web (count 11) with tasks 0 and 2 on m1, 1 unplaced, 10 on m2."""
    answer = await region.api.post(
        "/v1/jobs", headers=ALICE, json=job_spec("web", count=11, cpu=100)
    )
    assert answer.status_code == 201, answer.text
    await seed_tasks(region.store)


async def stored_operations(region: Region) -> list[TaskOperation]:
    kvs = (await region.store.range(keys.operations_of("team-a", "web"))).kvs
    return [from_json(TaskOperation, kv.value, stored=True) for kv in kvs]


async def test_a_member_asks_for_restarts_and_sees_them_in_the_job(region: Region) -> None:
    await submitted_with_tasks(region)
    asked = await region.api.post(
        "/v1/jobs/team-a/web/operations",
        headers=ALICE,
        json={"kind": "restart", "tasks": [0, 2], "reason": "config reload"},
    )
    assert asked.status_code == 202, asked.text
    operations = asked.json()["operations"]
    assert [(o["kind"], o["tasks"], o["state"]) for o in operations] == [
        ("restart", [0], "pending-approval"),
        ("restart", [2], "pending-approval"),
    ]
    assert operations[0]["reason"] == "config reload (by alice)"
    assert [o["attempt"] for o in operations] == [1, 2]
    assert sorted(o.id for o in await stored_operations(region)) == sorted(
        o["id"] for o in operations
    )
    # Asking again keeps the open ones instead of adding twins.
    again = await region.api.post(
        "/v1/jobs/team-a/web/operations", headers=ALICE, json={"kind": "restart", "tasks": [2]}
    )
    assert [o["id"] for o in again.json()["operations"]] == [operations[1]["id"]]
    assert len(await stored_operations(region)) == 2

    listed = await region.api.get("/v1/jobs/team-a/web/operations", headers=ALICE)
    assert [o["id"] for o in listed.json()["operations"]] == [o["id"] for o in operations]
    await region.store.put(
        keys.control_status("team-a", "web"),
        to_json(
            ControlStatus(sequence=4, controller="127.0.0.1:9", error="UNAVAILABLE", failures=2)
        ),
    )
    view = (await region.api.get("/v1/jobs/team-a/web", headers=ALICE)).json()
    assert view["operations"] == {"pending-approval": 2}
    assert (view["control"]["error"], view["control"]["failures"]) == ("UNAVAILABLE", 2)


async def test_bad_operation_requests_are_refused_and_store_nothing(region: Region) -> None:
    await submitted_with_tasks(region)
    cases = [
        (MALLORY, "team-a/web", {"kind": "restart"}, 403, "team-a"),
        (ALICE, "team-a/nope", {"kind": "restart"}, 404, "team-a/nope"),
        (ALICE, "team-a/web", {"kind": "update"}, 422, "kind"),
        (ALICE, "team-a/web", {"kind": "restart", "tasks": []}, 422, "tasks"),
        (ALICE, "team-a/web", {"kind": "move", "tasks": [11, 40]}, 422, "no task 11, 40"),
        (ALICE, "team-a/web", {"kind": "move", "tasks": [0, 1]}, 409, "1 of job"),
        (ALICE, "team-a/web", {"kind": "restart", "force": True}, 422, "force"),
    ]
    for headers, handle, body, status, fragment in cases:
        answer = await region.api.post(f"/v1/jobs/{handle}/operations", headers=headers, json=body)
        assert_problem(answer, status, fragment)
    assert await stored_operations(region) == []
    # Every task of the job by default: task 1 has no machine.
    everything = await region.api.post(
        "/v1/jobs/team-a/web/operations", headers=ALICE, json={"kind": "restart"}
    )
    assert_problem(everything, 409, "1")
    assert await stored_operations(region) == []


async def test_machines_seeded_here_are_valid_machine_records(region: Region) -> None:
    # Guards the helper above: a topology the API cannot read would make every case a 404.
    await seed_machines(region)
    kv = await region.store.get(keys.machine("m3"))
    assert kv is not None
    assert from_json(Machine, kv.value, stored=True).topology.msb == "msb2"
