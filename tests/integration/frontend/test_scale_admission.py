"""Scaling a job over real HTTP goes through admission like a submission: a service that does
not fit is refused with 409 and nothing changes, a scale-down gives the quota back in the
admission record at once, and the tasks a scale-up adds wait in the queue. No scheduler runs
here: a test admits jobs by writing their records as the decider would."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.integration.frontend.conftest import ALICE, Region, job_spec
from tests.integration.frontend.problems import assert_problem
from tests.integration.frontend.test_admission import batch
from tests.support.waiting import eventually
from tether.model import Job, from_json, to_json
from tether.model.admission import Admission, AdmissionEventKind, AdmissionState
from tether.store import keys


async def stored(region: Region, name: str) -> Admission:
    kv = await region.store.get(keys.admission("team-a", name))
    assert kv is not None
    return from_json(Admission, kv.value, stored=True)


async def admit(region: Region, name: str, tasks: int | None = None) -> None:
    """Admits the job's tasks (all of them by default), as the decider would."""
    record = await stored(region, name)
    admitted = record.model_copy(
        update={
            "state": AdmissionState.ADMITTED,
            "admitted": record.tasks if tasks is None else tasks,
            "admitted_at": datetime.now(UTC),
        }
    )
    await region.store.put(keys.admission("team-a", name), to_json(admitted))


async def submitted(region: Region, body: dict[str, Any]) -> None:
    created = await region.api.post("/v1/jobs", headers=ALICE, json=body)
    assert created.status_code == 201, created.text
    await admit(region, body["name"])


async def scale(region: Region, name: str, count: int) -> Any:
    return await region.api.post(
        f"/v1/jobs/team-a/{name}/scale", headers=ALICE, json={"count": count}
    )


async def test_a_service_scaled_beyond_what_its_entitlement_can_hold_is_refused(
    region: Region,
) -> None:
    # team-a's quota is 4000 millicores: 2 tasks of 1500 fit, 3 never can.
    await submitted(region, job_spec("web", count=2, cpu=1500))
    revision = await region.store.revision()
    refused = await scale(region, "web", 3)
    assert_problem(
        refused,
        409,
        "job 'team-a/web' at 3 task(s) could never be admitted",
        "cpu: need 4500 millicores, 4000 free",
    )
    assert await region.store.revision() == revision
    record = await stored(region, "web")
    assert (record.state, record.admitted, record.tasks) == (AdmissionState.ADMITTED, 2, 2)


async def test_a_service_scaled_up_without_room_now_is_refused_and_keeps_its_tasks(
    region: Region,
) -> None:
    await submitted(region, batch("batch", 1, task=job_spec(cpu=1500)["task"]))
    await submitted(region, job_spec("web", count=1, cpu=1500))
    revision = await region.store.revision()
    # Its own task counts: 1500 more beside the 3000 reserved leave 1000 free, not 2500.
    refused = await scale(region, "web", 2)
    assert_problem(
        refused,
        409,
        "entitlement 'team-a' has no room for job 'team-a/web' at 2 task(s) now",
        "need: 1 task(s) beside the 1 it holds",
        "cpu: need 1500 millicores, 1000 free",
        "it stays at 1 task(s) (1 admitted)",
        "on_full: queue",
    )
    assert await region.store.revision() == revision
    # One that waits is scaled, and its added task waits for admission.
    waits = job_spec("patient", count=1, cpu=1000) | {"on_full": "queue"}
    await submitted(region, waits)
    assert (await scale(region, "patient", 2)).status_code == 200
    record = await stored(region, "patient")
    assert (record.state, record.admitted, record.tasks) == (AdmissionState.ADMITTED, 1, 2)


async def test_a_scale_down_gives_quota_back_and_a_scale_up_waits_in_the_queue(
    region: Region,
) -> None:
    api = region.api
    await submitted(region, batch("a", 2, task=job_spec(cpu=1500)["task"]))
    down = await scale(region, "a", 1)
    assert down.status_code == 200, down.text
    record = await stored(region, "a")
    assert (record.state, record.admitted, record.tasks) == (AdmissionState.ADMITTED, 1, 1)
    event = record.history[-1]
    assert (event.kind, event.tasks) == (AdmissionEventKind.RESIZED, 1)
    assert event.detail == "scaled from 2 to 1 task(s), 1 admitted"
    # Back to 2: the task it gains waits for the decider, and the queue says so.
    up = await scale(region, "a", 2)
    assert up.status_code == 200, up.text
    record = await stored(region, "a")
    assert (record.state, record.admitted, record.tasks) == (AdmissionState.ADMITTED, 1, 2)
    view = up.json()
    assert (view["queue_position"], view["admission"]["admitted"]) == (1, 1)

    async def listed() -> dict[str, Any]:
        return (await api.get("/v1/queues/team-a", headers=ALICE)).json()  # type: ignore[no-any-return]

    queue = await eventually(listed, lambda q: q["total"] == 1, what="a in its queue")
    [entry] = queue["jobs"]
    assert (entry["job"], entry["position"], entry["tasks"], entry["admitted"]) == (
        "team-a/a",
        1,
        2,
        1,
    )


async def test_a_record_left_above_its_count_is_brought_down_by_the_next_scale(
    region: Region,
) -> None:
    """A scale-down before this fix left `admitted` above the count; scaled again, the record
    says what the job holds, not what it once did."""
    await submitted(region, batch("a", 1, task=job_spec(cpu=1000)["task"]))
    await admit(region, "a", 2)
    assert (await scale(region, "a", 2)).status_code == 200
    record = await stored(region, "a")
    assert (record.admitted, record.tasks) == (1, 2)


async def test_a_job_older_than_admission_records_gets_one_when_scaled(region: Region) -> None:
    assert (await region.api.post("/v1/jobs", headers=ALICE, json=job_spec("old"))).is_success
    await region.store.delete(keys.admission("team-a", "old"))
    assert (await scale(region, "old", 3)).status_code == 200
    record = await stored(region, "old")
    assert (record.state, record.admitted, record.tasks) == (AdmissionState.ADMITTED, 2, 3)
    kv = await region.store.get(keys.job("team-a", "old"))
    assert kv is not None
    assert from_json(Job, kv.value, stored=True).spec.count == 3
