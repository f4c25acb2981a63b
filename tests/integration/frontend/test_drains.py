"""The admin API draining, decommissioning and undraining machines, on both store backends:
the notices it stores, its idempotence, and what it refuses without changing anything."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.frontend.conftest import ADMIN, ALICE, Region, register_broker
from tests.integration.frontend.problems import assert_problem
from tests.integration.frontend.test_taskcontrol_api import OPERATOR, seed_machines, stored_notices
from tether.frontend.schemas.maintenance import DEFAULT_DRAIN_DEADLINE_S
from tether.model import MAX_MAINTENANCE_S, MaintenanceKind
from tether.store import keys


async def test_an_admin_drains_a_machine_once_however_often_asked(region: Region) -> None:
    await seed_machines(region)
    before = datetime.now(UTC)
    drained = await region.api.post(
        "/admin/machines/m1/drain", headers=ADMIN, json={"deadline_s": 120, "reason": "bad disk"}
    )
    assert drained.status_code == 201, drained.text
    assert drained.headers["location"] == "/v1/maintenance/drain-m1"
    view = drained.json()
    assert (view["machine"], view["created"]) == ("m1", True)
    assert view["notice"]["kind"] == "drain"
    assert view["notice"]["phase"] == "scheduled"
    [notice] = await stored_notices(region)
    assert (notice.id, notice.machines, notice.kind) == ("drain-m1", ["m1"], MaintenanceKind.DRAIN)
    assert (notice.duration_s, notice.reason) == (MAX_MAINTENANCE_S, "bad disk")
    assert (
        before + timedelta(seconds=120)
        <= notice.start
        <= datetime.now(UTC) + timedelta(seconds=120)
    )

    # Asked again, with another deadline: the first drain stands, and the answer says so.
    again = await region.api.post("/admin/machines/m1/drain", headers=ADMIN, json={"deadline_s": 0})
    assert again.status_code == 200, again.text
    assert again.json()["created"] is False
    assert again.json()["notice"]["id"] == "drain-m1"
    assert datetime.fromisoformat(again.json()["notice"]["start"]) == notice.start
    assert await stored_notices(region) == [notice]


async def test_the_body_is_optional_and_a_deadline_of_0_moves_at_once(region: Region) -> None:
    await seed_machines(region)
    before = datetime.now(UTC)
    defaulted = await region.api.post("/admin/machines/m1/drain", headers=ADMIN)
    assert defaulted.status_code == 201, defaulted.text
    start = datetime.fromisoformat(defaulted.json()["notice"]["start"])
    assert start >= before + timedelta(seconds=DEFAULT_DRAIN_DEADLINE_S)
    at_once = await region.api.post(
        "/admin/machines/m2/decommission", headers=ADMIN, json={"deadline_s": 0}
    )
    assert at_once.status_code == 201, at_once.text
    assert at_once.json()["notice"]["phase"] == "in-progress"
    assert datetime.fromisoformat(at_once.json()["notice"]["start"]) <= datetime.now(UTC)
    assert {n.id for n in await stored_notices(region)} == {"drain-m1", "decommission-m2"}


async def test_a_drained_machine_can_be_decommissioned_and_undrain_undoes_both(
    region: Region,
) -> None:
    await seed_machines(region)
    assert (await region.api.post("/admin/machines/m1/drain", headers=ADMIN)).status_code == 201
    decommissioned = await region.api.post("/admin/machines/m1/decommission", headers=ADMIN)
    assert decommissioned.status_code == 201, decommissioned.text
    assert decommissioned.json()["notice"]["id"] == "decommission-m1"
    # A decommission drains too: asking for either again changes nothing.
    for verb in ("drain", "decommission"):
        again = await region.api.post(f"/admin/machines/m1/{verb}", headers=ADMIN)
        assert again.status_code == 200, again.text
        assert (again.json()["created"], again.json()["notice"]["id"]) == (
            False,
            "decommission-m1",
        )
    assert {n.id for n in await stored_notices(region)} == {"drain-m1", "decommission-m1"}

    undone = await region.api.post("/admin/machines/m1/undrain", headers=ADMIN)
    assert undone.status_code == 200, undone.text
    assert undone.json()["machine"] == "m1"
    assert [n["id"] for n in undone.json()["cancelled"]] == ["decommission-m1", "drain-m1"]
    assert await stored_notices(region) == []
    nothing = await region.api.post("/admin/machines/m1/undrain", headers=ADMIN)
    assert nothing.status_code == 200, nothing.text
    assert nothing.json()["cancelled"] == []


async def test_undrain_leaves_planned_maintenance_alone(region: Region) -> None:
    await seed_machines(region)
    planned = await region.api.post(
        "/v1/maintenance",
        headers=OPERATOR,
        json={"machines": ["m1"], "duration_s": 60, "kind": "reboot"},
    )
    assert planned.status_code == 201, planned.text
    assert (await region.api.post("/admin/machines/m1/drain", headers=ADMIN)).status_code == 201
    undone = await region.api.post("/admin/machines/m1/undrain", headers=ADMIN)
    assert [n["id"] for n in undone.json()["cancelled"]] == ["drain-m1"]
    assert [n.id for n in await stored_notices(region)] == [planned.json()["id"]]


async def test_bad_drain_requests_are_refused_and_change_nothing(region: Region) -> None:
    await seed_machines(region)
    drained = await region.api.post("/admin/machines/m2/drain", headers=ADMIN)
    assert drained.status_code == 201, drained.text
    existing = await stored_notices(region)
    cases: list[tuple[str, dict[str, str], object, int, str]] = [
        ("m1/drain", ALICE, {}, 403, "not an admin"),
        ("m1/decommission", OPERATOR, {}, 403, "not an admin"),
        ("m2/undrain", OPERATOR, None, 403, "not an admin"),
        ("m9/drain", ADMIN, {}, 404, "m9"),
        ("m9/decommission", ADMIN, {"deadline_s": 0}, 404, "m9"),
        ("m9/undrain", ADMIN, None, 404, "m9"),
        ("m1/drain", ADMIN, {"deadline_s": -1}, 422, "deadline_s"),
        ("m1/drain", ADMIN, {"deadline_s": "soon"}, 422, "deadline_s"),
        ("m1/drain", ADMIN, {"deadline_s": MAX_MAINTENANCE_S + 1}, 422, "deadline_s"),
        ("m1/decommission", ADMIN, {"reason": "x" * 1001}, 422, "reason"),
        ("m1/decommission", ADMIN, {"deadline": 10}, 422, "deadline"),
        ("m1/drain", ADMIN, [1], 422, "should be an object"),
    ]
    for path, headers, body, status, fragment in cases:
        if body is None:
            answer = await region.api.post(f"/admin/machines/{path}", headers=headers)
        else:
            answer = await region.api.post(f"/admin/machines/{path}", headers=headers, json=body)
        assert_problem(answer, status, fragment)
    unparsable = await region.api.post(
        "/admin/machines/m1/drain",
        headers=ADMIN | {"Content-Type": "application/json"},
        content=b"{not json",
    )
    assert_problem(unparsable, 400, "not valid JSON")
    bad_id = await region.api.post("/admin/machines/Not_A_Machine/drain", headers=ADMIN)
    assert_problem(bad_id, 422, "machine_id")
    assert await stored_notices(region) == existing


async def test_only_admins_cancel_a_drain_and_operators_cannot_schedule_one(
    region: Region,
) -> None:
    await seed_machines(region)
    assert (await region.api.post("/admin/machines/m1/drain", headers=ADMIN)).status_code == 201
    [drain] = await stored_notices(region)
    refused = await region.api.delete("/v1/maintenance/drain-m1", headers=OPERATOR)
    assert_problem(refused, 403, "not an admin")
    assert await stored_notices(region) == [drain]
    for kind in ("drain", "decommission"):
        scheduled = await region.api.post(
            "/v1/maintenance",
            headers=OPERATOR,
            json={"machines": ["m2"], "duration_s": 60, "kind": kind},
        )
        assert_problem(scheduled, 422, f"/admin/machines/<id>/{kind}")
    assert await stored_notices(region) == [drain]
    cancelled = await region.api.delete("/v1/maintenance/drain-m1", headers=ADMIN)
    assert cancelled.status_code == 200, cancelled.text
    assert await stored_notices(region) == []


async def test_without_a_broker_for_the_datacenter_nothing_is_drained_or_scheduled(
    region: Region,
) -> None:
    # The broker of dc1 carries out the maintenance of its machines; without one running, a
    # notice would wait forever, so none is stored.
    await seed_machines(region)
    await region.store.delete(keys.brokers_of("dc1"), prefix=True)
    for path in ("m1/drain", "m1/decommission"):
        answer = await region.api.post(f"/admin/machines/{path}", headers=ADMIN)
        assert_problem(answer, 409, "no broker runs for datacenter 'dc1'")
    planned = {"msb": "dc1/msb1", "duration_s": 600, "kind": "reboot", "reason": "kernel"}
    scheduled = await region.api.post("/v1/maintenance", headers=OPERATOR, json=planned)
    assert_problem(scheduled, 409, "tether broker --dc dc1")
    assert await stored_notices(region) == []

    await register_broker(region.store, "dc1")
    drained = await region.api.post("/admin/machines/m1/drain", headers=ADMIN)
    assert drained.status_code == 201, drained.text
    scheduled = await region.api.post("/v1/maintenance", headers=OPERATOR, json=planned)
    assert scheduled.status_code == 201, scheduled.text
