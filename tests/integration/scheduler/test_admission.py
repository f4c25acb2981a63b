"""Admission on a real store: a leading scheduler admits queued jobs in order as quota frees."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.integration.scheduler.fake_allocator import FakeAllocator
from tests.integration.scheduler.helpers import TASK_CPU, make_job, put, read, submit
from tests.support.waiting import eventually
from tether.model import Entitlement, Job, Quota, Resources
from tether.model.admission import Admission, AdmissionState
from tether.scheduler.service import Scheduler
from tether.scheduler.settings import SchedulerSettings
from tether.store import Store, keys, open_store

REPO = Path(__file__).resolve().parents[3]
SHARD = "shard-0"
# The only replica: a long lease keeps a loaded machine's stall from ending its term mid-test.
FAST = SchedulerSettings(lease_ttl_s=10, resync_s=0.5, place_retry_s=0.3, allocator_timeout_s=3)


async def admission(store: Store, handle: str) -> Admission:
    entitlement, name = handle.split("/")
    record = await read(store, keys.admission(entitlement, name), Admission)
    assert record is not None
    return record


async def test_queued_jobs_are_admitted_in_order_as_quota_frees(
    store: Store, store_url: str, allocator: FakeAllocator
) -> None:
    quota = Quota(resources=Resources(cpu=3 * TASK_CPU, memory_mib=1024))
    await put(store, keys.entitlement("ads"), Entitlement(name="ads", quota=quota))
    await store.put(keys.shard_assignment("ads"), SHARD.encode())
    for name, count in (("first", 2), ("second", 2), ("small", 1)):
        await submit(store, make_job("ads", name, count))
    replica = Scheduler(open_store(store_url), SHARD, FAST)
    await replica.start()
    try:
        await asyncio.wait_for(replica.leading.wait(), 10)

        async def states(*names: str) -> dict[str, tuple[AdmissionState, int]]:
            found = {}
            for name in names or ("first", "second", "small"):
                record = await admission(store, f"ads/{name}")
                found[name] = (record.state, record.admitted)
            return found

        await eventually(lambda: states(), lambda s: s["first"] == (AdmissionState.ADMITTED, 2))
        head = await admission(store, "ads/second")
        # The head does not fit, and nothing behind it overtakes it.
        assert head.state is AdmissionState.QUEUED
        assert "not enough quota for 2 task(s)" in head.reason
        assert (await admission(store, "ads/small")).state is AdmissionState.QUEUED
        assert len((await store.range(keys.tasks_of("ads", "second"))).kvs) == 0
        # Deleting the first job frees its quota once its tasks are gone.
        first = await read(store, keys.job("ads", "first"), Job)
        assert first is not None
        await put(store, keys.job("ads", "first"), first.model_copy(update={"deleting": True}))
        admitted = (AdmissionState.ADMITTED, 2), (AdmissionState.ADMITTED, 1)
        # (The first job's record goes with it.)
        await eventually(
            lambda: states("second", "small"), lambda s: (s["second"], s["small"]) == admitted
        )
        await eventually(
            lambda: store.range(keys.tasks_of("ads", "second")), lambda r: len(r.kvs) == 2
        )
    finally:
        await replica.stop()


async def test_a_job_whose_admission_record_has_not_shown_runs_nothing_until_it_does(
    store: Store, store_url: str, allocator: FakeAllocator
) -> None:
    """The frontend writes a job and its queued admission record in one transaction, but a
    scheduler follows them through two watches: one may show the job first. Until its record
    shows, the job is neither run whole (as a job older than admission records is) nor
    counted against the quota."""
    quota = Quota(resources=Resources(cpu=2 * TASK_CPU, memory_mib=1024))
    await put(store, keys.entitlement("ads"), Entitlement(name="ads", quota=quota))
    await store.put(keys.shard_assignment("ads"), SHARD.encode())
    early = make_job("ads", "early", 2).model_copy(update={"has_admission": True})
    await put(store, keys.job("ads", "early"), early)
    replica = Scheduler(open_store(store_url), SHARD, FAST)
    await replica.start()
    try:
        await asyncio.wait_for(replica.leading.wait(), 10)
        # A job submitted after it is admitted and placed: the leader has planned both since.
        await submit(store, make_job("ads", "later", 2))
        await eventually(
            lambda: store.range(keys.tasks_of("ads", "later")), lambda r: len(r.kvs) == 2
        )
        assert len((await store.range(keys.tasks_of("ads", "early"))).kvs) == 0
        assert await store.get(keys.admission("ads", "early")) is None
        # Its record shows: it queues behind the job that took the quota meanwhile.
        await put(store, keys.admission("ads", "early"), Admission.of(early.spec, early.created_at))
        await eventually(
            lambda: admission(store, "ads/early"),
            lambda record: "not enough quota" in record.reason,
        )
        assert (await admission(store, "ads/early")).state is AdmissionState.QUEUED
        assert len((await store.range(keys.tasks_of("ads", "early"))).kvs) == 0
    finally:
        await replica.stop()
