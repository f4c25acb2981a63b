"""Admission on a whole region (`tether up`, real task processes): jobs over quota queue and
start in order; a high-priority job preempts a low one through TaskControl, with notice and a
grace deadline, and the low one requeues and runs again later; no task runs twice at once; a
team that borrows its sibling's idle quota gives it back when the sibling submits; a suspended
job stops with notice like a preempted one and runs again once resumed; nothing is preempted
for a job whose tasks would not fit the machines anyway; a scale goes through admission (issue
28: a service scaled over its quota is refused, a batch job's scale-down gives quota back and
its scale-up waits, and no revision reserves or holds beyond the quota)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.support.faults import TwiceSampler
from tests.support.harness import LocalRegion, all_running, get_json, submit, wait_for
from tests.support.preempt_controller import Controller
from tests.support.quota_audit import over_quota_revisions, over_reserved_revisions
from tether.model import Entitlement, Quota, RegionConfig, Resources, from_json
from tether.store import keys, open_store

GRACE_S = 3.0
PROTECTED = 900
"""The region's non_preemptible_priority (`tether up --non-preemptible-priority`)."""


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    """The region of this module: machines an entitlement no longer uses go back to the free
    pool after a second (not five minutes), so each test's entitlement finds some."""
    running = LocalRegion(
        tmp_path_factory.mktemp("region") / "tether",
        up_args=["--non-preemptible-priority", str(PROTECTED)],
        extra_env={
            "TETHER_ALLOCATOR_IDLE_RETURN_S": "1",
            "TETHER_ALLOCATOR_IDLE_CHECK_S": "0.5",
        },
    )
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(region: LocalRegion) -> Iterator[None]:
    """Deletes what a failed test left running: the region's machines are the next tests'."""
    yield
    with region.client() as client:
        for left in get_json(client, "/v1/jobs")["jobs"]:
            if not left["deleting"]:
                client.delete(f"/v1/jobs/{left['entitlement']}/{left['name']}")


def job(name: str, entitlement: str, count: int, *, seconds: int, **fields: Any) -> dict[str, Any]:
    """A batch job whose tasks sleep `seconds` and exit."""
    return {
        "name": name,
        "entitlement": entitlement,
        "count": count,
        "kind": "batch",
        "task": {
            "package": "sleeper",
            "version": "1",
            "command": "/bin/sh",
            "args": ["-c", f"exec sleep {seconds}"],
            "resources": {"cpu": 100, "memory_mib": 64},
            "restart": {"mode": "on-failure", "backoff_initial_s": 0.5, "backoff_max_s": 2},
        },
        **fields,
    }


def create_entitlement(region: LocalRegion, name: str, tasks: int) -> None:
    """An entitlement of the admin's with room for `tasks` of `job`'s tasks."""
    body = {
        "name": name,
        "quota": {"resources": {"cpu": 100 * tasks, "memory_mib": 64 * tasks}},
        "preemption": {"grace_s": GRACE_S},
        "members": ["admin"],
    }
    with region.client() as client:
        created = client.post("/v1/entitlements", json=body)
        assert created.status_code == 201, created.text


def admission(region: LocalRegion, handle: str) -> dict[str, Any]:
    with region.client() as client:
        found: dict[str, Any] = get_json(client, f"/v1/jobs/{handle}")["admission"]
    return found


def test_the_region_protects_the_band_tether_up_was_given(region: LocalRegion) -> None:
    async def read() -> RegionConfig:
        async with open_store(region.store_url()) as store:
            kv = await store.get(keys.region_config())
            assert kv is not None
            return from_json(RegionConfig, kv.value, stored=True)

    assert asyncio.run(read()).non_preemptible_priority == PROTECTED


def test_jobs_over_quota_queue_and_start_in_order(region: LocalRegion) -> None:
    create_entitlement(region, "orderly", 4)

    def admitted_at(handle: str) -> datetime | None:
        stamp = admission(region, handle)["admitted_at"]
        return None if stamp is None else datetime.fromisoformat(stamp)

    with region.client() as client:
        # The first runs until deleted, so the queue cannot move while it is read.
        first = submit(client, job("first", "orderly", 4, seconds=600))
        second = submit(client, job("second", "orderly", 3, seconds=1))
        third = submit(client, job("third", "orderly", 2, seconds=1))
        wait_for(lambda: all_running(client, first, 4), timeout_s=60, what="the first job running")
        assert get_json(client, f"/v1/jobs/{second}")["queue_position"] == 1
        assert get_json(client, f"/v1/jobs/{third}")["queue_position"] == 2
        queue = get_json(client, "/v1/queues/orderly")
        assert [job["job"] for job in queue["jobs"]] == [second, third]

        def reported() -> dict[str, Any] | None:
            uses = {use["name"]: use for use in get_json(client, "/v1/queues")["queues"]}
            use = uses.get("orderly")
            return use if use is not None and use["queued"] == 2 else None

        use = wait_for(reported, timeout_s=30, what="the decider's report of orderly")
        assert (use["admitted"], use["reserved"]["cpu"]) == (1, 400)
        listed = region.cli("queue", "ls", "orderly")
        assert listed.returncode == 0, listed.stderr
        assert "orderly/second" in listed.stdout
        first_admitted = admitted_at(first)
        assert client.delete(f"/v1/jobs/{first}").status_code == 202

    wait_for(lambda: admitted_at(third), timeout_s=60, what="the third job admitted")
    times = [first_admitted, admitted_at(second), admitted_at(third)]
    assert times == sorted(times)  # type: ignore[type-var]
    # The second (3 tasks) waited for the first to be gone; the third (2) for the second.
    for handle in (second, third):
        kinds = [event["kind"] for event in admission(region, handle)["history"]]
        assert kinds == ["queued", "admitted"]


@pytest.mark.timeout(180)
def test_a_high_priority_job_preempts_a_low_one_which_requeues_and_runs_later(
    region: LocalRegion,
) -> None:
    create_entitlement(region, "contended", 4)
    sampler = TwiceSampler(region.state_dir)
    sampler.start()
    try:
        with region.client() as client:
            low = submit(client, job("low", "contended", 4, seconds=3600, priority=100))
            wait_for(lambda: all_running(client, low, 4), timeout_s=60, what="the low job running")
            with Controller(region, low) as controller:
                high = submit(client, job("high", "contended", 4, seconds=3600, priority=200))
                # The low job's controller is told, with the grace period as the deadline.
                wait_for(
                    lambda: len(controller.preempts) == 4,
                    timeout_s=30,
                    what="PREEMPT for every low task",
                )
                for operation in controller.preempts.values():
                    grace = operation.deadline.ToDatetime() - operation.created_at.ToDatetime()
                    assert grace.total_seconds() == pytest.approx(GRACE_S, abs=0.01)
                # It approves nothing: at the deadline the low tasks stop, and the high job runs.
                wait_for(lambda: all_running(client, high, 4), timeout_s=60, what="the high job")
            record = admission(region, low)
            assert record["state"] == "queued"
            assert (record["preemptions"], record["preempted_by"]) == (1, high)
            kinds = [event["kind"] for event in record["history"]]
            assert kinds == ["queued", "admitted", "preempted", "requeued"]
            assert get_json(client, f"/v1/jobs/{low}")["queue_position"] == 1
            # Once the high job is gone, the low one runs again.
            assert client.delete(f"/v1/jobs/{high}").status_code == 202
            wait_for(lambda: all_running(client, low, 4), timeout_s=60, what="the low job again")
            # Its machines go back to the free pool for the tests after it.
            assert client.delete(f"/v1/jobs/{low}").status_code == 202
    finally:
        sampler.stop()
        sampler.join()
    assert all(count == 1 for count in sampler.most.values()), sampler.most


@pytest.mark.timeout(180)
def test_a_suspended_job_stops_with_notice_frees_its_quota_and_resumes(
    region: LocalRegion,
) -> None:
    create_entitlement(region, "rounds", 2)
    with region.client() as client:
        gang = submit(client, job("gang", "rounds", 2, seconds=3600))
        wait_for(lambda: all_running(client, gang, 2), timeout_s=60, what="the gang running")
        waiting = submit(client, job("waiting", "rounds", 2, seconds=3600))
        with Controller(region, gang) as controller:
            patched = client.patch(f"/v1/jobs/{gang}", json={"suspended": True})
            assert patched.status_code == 200, patched.text
            # Its controller is told, with the grace to checkpoint, as for a preemption.
            wait_for(
                lambda: len(controller.preempts) == 2, timeout_s=30, what="PREEMPT for the gang"
            )
            # At the deadline its tasks stop, and the job that waited for the quota runs.
            wait_for(lambda: all_running(client, waiting, 2), timeout_s=60, what="the waiting job")
        record = admission(region, gang)
        assert (record["state"], record["reason"], record["preempted_by"]) == (
            "queued",
            "suspended",
            None,
        )
        preempted = [event for event in record["history"] if event["kind"] == "preempted"]
        assert [event["cause"] for event in preempted] == ["suspended"]
        assert get_json(client, f"/v1/jobs/{gang}")["running"] == 0
        # Resumed, it is first in the queue and runs once the quota frees.
        resumed = client.patch(f"/v1/jobs/{gang}", json={"suspended": False})
        assert resumed.status_code == 200, resumed.text
        wait_for(
            lambda: get_json(client, f"/v1/jobs/{gang}")["queue_position"] == 1,
            timeout_s=30,
            what="the resumed job first in its queue",
        )
        assert client.delete(f"/v1/jobs/{waiting}").status_code == 202
        wait_for(lambda: all_running(client, gang, 2), timeout_s=60, what="the gang again")
        assert client.delete(f"/v1/jobs/{gang}").status_code == 202


def test_nothing_is_preempted_for_a_job_whose_tasks_would_not_fit_the_machines(
    region: LocalRegion,
) -> None:
    create_entitlement(region, "picky", 4)
    nowhere = {"constraints": [{"attribute": "zone", "op": "==", "value": "nowhere"}]}
    with region.client() as client:
        low = submit(client, job("low", "picky", 4, seconds=3600, priority=100))
        wait_for(lambda: all_running(client, low, 4), timeout_s=60, what="the low job running")
        # By quota the high job may preempt the low one; no machine has the zone it wants.
        high = submit(
            client, job("high", "picky", 4, seconds=3600, priority=200, placement=nowhere)
        )

        def refused() -> str | None:
            reason: str = admission(region, high)["reason"]
            return reason if "would not fit the machines" in reason else None

        # The decider's note on the head is the event that proves it considered preempting.
        reason = wait_for(refused, timeout_s=30, what="the preemption refused by placement")
        assert "zone" in reason
        record = admission(region, low)
        assert (record["state"], record["preemptions"]) == ("admitted", 0)
        assert all_running(client, low, 4)
        for handle in (high, low):
            assert client.delete(f"/v1/jobs/{handle}").status_code == 202


def test_a_borrowing_team_gives_quota_back_when_its_sibling_submits(region: LocalRegion) -> None:
    quota = {"cpu": 400, "memory_mib": 256}
    with region.client() as client:
        for body in (
            {"name": "lab", "quota": {"resources": quota}},
            {"name": "owner", "parent": "lab", "quota": {"resources": quota}, "members": ["admin"]},
            {
                "name": "guest",
                "parent": "lab",
                "borrowing_limit": quota,
                "preemption": {"grace_s": GRACE_S},
                "members": ["admin"],
            },
        ):
            created = client.post("/v1/entitlements", json=body)
            assert created.status_code == 201, created.text
        # guest has no quota of its own: it runs on what owner does not use, at a priority
        # owner's job does not have.
        borrowed = submit(client, job("borrowed", "guest", 4, seconds=3600, priority=800))
        wait_for(lambda: all_running(client, borrowed, 4), timeout_s=60, what="guest running")
        own = submit(client, job("own", "owner", 4, seconds=3600, priority=1))
        wait_for(lambda: all_running(client, own, 4), timeout_s=60, what="owner's job running")
        record = admission(region, borrowed)
        assert (record["state"], record["preempted_by"]) == ("queued", own)
        [preempted] = [event for event in record["history"] if event["kind"] == "preempted"]
        assert (preempted["cause"], preempted["tasks"]) == ("reclaim", 4)
        # Once owner's job is gone, guest borrows again.
        assert client.delete(f"/v1/jobs/{own}").status_code == 202
        wait_for(lambda: all_running(client, borrowed, 4), timeout_s=60, what="guest again")
        # Its machines go back to the free pool for the tests after it.
        assert client.delete(f"/v1/jobs/{borrowed}").status_code == 202


TIGHT = Resources(cpu=1000, memory_mib=1024)
"""The issue's entitlement: 1,000 millicores, for tasks of 400."""


def tight(region: LocalRegion, name: str) -> Entitlement:
    entitlement = Entitlement(name=name, quota=Quota(resources=TIGHT), members=["admin"])
    with region.client() as client:
        created = client.post("/v1/entitlements", json=entitlement.model_dump(mode="json"))
        assert created.status_code == 201, created.text
    return entitlement


def wide(spec: dict[str, Any]) -> dict[str, Any]:
    """The job with tasks of 400 millicores."""
    task = spec["task"] | {"resources": {"cpu": 400, "memory_mib": 64}}
    return spec | {"task": task}


def audit(region: LocalRegion, entitlement: Entitlement, start: int) -> list[str]:
    """Every revision since `start` at which the entitlement's admission records reserved, or
    its tasks on machines held, more than its quota."""

    async def read() -> list[str]:
        async with open_store(region.store_url()) as store:
            end = await store.revision()
            reserved = await over_reserved_revisions(store, [entitlement], start, end)
            return reserved + await over_quota_revisions(store, [entitlement], start, end)

    return asyncio.run(read())


def store_revision(region: LocalRegion) -> int:
    async def read() -> int:
        async with open_store(region.store_url()) as store:
            return await store.revision()

    return asyncio.run(read())


def test_a_service_scaled_beyond_its_quota_is_refused_and_keeps_its_tasks(
    region: LocalRegion,
) -> None:
    tight(region, "scaled-service")
    with region.client() as client:
        web = submit(client, wide(job("web", "scaled-service", 2, seconds=3600, kind="service")))
        wait_for(lambda: all_running(client, web, 2), timeout_s=60, what="the service running")
        refused = client.post(f"/v1/jobs/{web}/scale", json={"count": 3})
        assert refused.status_code == 409, refused.text
        assert refused.headers["content-type"] == "application/problem+json"
        detail = refused.json()["detail"]
        assert "could never be admitted" in detail
        assert "cpu: need 1200 millicores, 1000 free" in detail
        view = get_json(client, f"/v1/jobs/{web}")
        assert (view["count"], view["generation"]) == (2, 1)
        record = view["admission"]
        assert (record["state"], record["admitted"], record["tasks"]) == ("admitted", 2, 2)
        assert all_running(client, web, 2)
        assert client.delete(f"/v1/jobs/{web}").status_code == 202


@pytest.mark.timeout(180)
def test_a_batch_scale_down_gives_quota_back_and_its_scale_up_waits_for_room(
    region: LocalRegion,
) -> None:
    entitlement = tight(region, "scaled-batch")
    start = store_revision(region)
    with region.client() as client:
        a = submit(client, wide(job("a", "scaled-batch", 2, seconds=3600)))
        wait_for(lambda: all_running(client, a, 2), timeout_s=60, what="a running")
        down = client.post(f"/v1/jobs/{a}/scale", json={"count": 1})
        assert down.status_code == 200, down.text
        record = down.json()["admission"]
        assert (record["admitted"], record["tasks"]) == (1, 1)
        assert record["history"][-1]["detail"] == "scaled from 2 to 1 task(s), 1 admitted"
        # b starts in the room a gave back, once a's second task has stopped.
        b = submit(client, wide(job("b", "scaled-batch", 1, seconds=3600)))
        wait_for(lambda: all_running(client, b, 1), timeout_s=60, what="b running")
        up = client.post(f"/v1/jobs/{a}/scale", json={"count": 2})
        assert up.status_code == 200, up.text

        def noted() -> dict[str, Any] | None:
            found = admission(region, a)
            return found if "not enough quota for 1 task(s)" in found["reason"] else None

        # The decider's note on a is the event that proves it considered a's second task.
        record = wait_for(noted, timeout_s=30, what="the decider's reason on a")
        assert (record["state"], record["admitted"], record["tasks"]) == ("admitted", 1, 2)
        assert "cpu: need 400 millicores, 200 free" in record["reason"]
        assert all_running(client, a, 1)

        def reported() -> dict[str, Any] | None:
            uses = {use["name"]: use for use in get_json(client, "/v1/queues")["queues"]}
            use = uses.get("scaled-batch")
            return use if use is not None and use["reserved"]["cpu"] == 800 else None

        # What the decider reports: within the quota, nothing borrowed.
        use = wait_for(reported, timeout_s=30, what="the decider's report of scaled-batch")
        assert use["borrowed"]["cpu"] == 0

        def listed() -> dict[str, Any] | None:
            queue = get_json(client, "/v1/queues/scaled-batch")
            reasons = [entry["reason"] for entry in queue["jobs"]]
            return queue if reasons == [record["reason"]] else None

        # The queue's view is this frontend's watch of the admission records, which trails the
        # store (where the job's view read the reason) by the watch's delay.
        queue = wait_for(listed, timeout_s=30, what="the queue's view of the decider's reason")
        [entry] = queue["jobs"]
        assert (entry["job"], entry["position"], entry["admitted"]) == (a, 1, 1)
        assert entry["reason"] == record["reason"]
        explained = region.cli("job", "explain", a)
        assert explained.returncode == 0, explained.stderr
        assert "waits in scaled-batch's queue for 1 more task(s) (1 of 2 admitted)" in (
            explained.stdout
        )
        assert "not enough quota for 1 task(s)" in explained.stdout
        # Once b is gone, a's second task is admitted and runs.
        assert client.delete(f"/v1/jobs/{b}").status_code == 202
        wait_for(lambda: all_running(client, a, 2), timeout_s=60, what="a's second task")
        assert client.delete(f"/v1/jobs/{a}").status_code == 202
    assert audit(region, entitlement, start) == []
