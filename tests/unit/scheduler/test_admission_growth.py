"""Admission queues, jobs that grow: a job scaled up waits for its added tasks at its place,
and elastic jobs grow without preempting themselves or each other in turn."""

from __future__ import annotations

from tests.unit.scheduler.test_admission_queues import NOW, Harness, ent, record
from tether.model.admission import AdmissionEventKind, AdmissionState
from tether.scheduler.admission.queued import QueuedJob


def scale(h: Harness, handle: str, count: int) -> None:
    """What the frontend writes when the job is scaled to `count`: its record, its tasks still
    held."""
    job = h.queues.jobs[handle]
    scaled = job.admission.scaled(count, count, NOW)
    h.queues.put(QueuedJob(job.entitlement, scaled, h.revision, job.holding))


def test_a_scaled_up_job_waits_for_its_added_tasks_at_its_place_and_says_why() -> None:
    h = Harness(ent("team", 11))
    h.submit(record("team", "a", 6, queued_s=1))
    h.submit(record("team", "b", 4, queued_s=2))
    h.decide()
    scale(h, "team/a", 8)
    h.submit(record("team", "c", 1, queued_s=3))
    h.decide()
    # a needs 2 more and 1 is free: it keeps its 6, and c, behind it, does not overtake it.
    assert h.state("team/a") == (AdmissionState.ADMITTED, 6)
    assert h.state("team/c") == (AdmissionState.QUEUED, 0)
    reason = h.queues.jobs["team/a"].admission.reason
    assert "not enough quota for 2 task(s): cpu: need 2 millicores, 1 free" in reason
    h.finish("team/b")
    h.decide()
    assert h.state("team/a") == (AdmissionState.ADMITTED, 8)
    assert h.state("team/c") == (AdmissionState.ADMITTED, 1)
    event = h.queues.jobs["team/a"].admission.history[-1]
    assert (event.kind, event.detail) == (AdmissionEventKind.RESIZED, "6 -> 8 task(s)")


def test_a_scale_down_gives_back_what_it_admitted_and_the_next_job_starts() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "a", 6, queued_s=1))
    h.submit(record("team", "b", 6, queued_s=2))
    h.decide()
    scale(h, "team/a", 4)
    assert h.state("team/a") == (AdmissionState.ADMITTED, 4)
    # Its 2 tasks beyond the count hold their quota until they have stopped.
    h.decide()
    assert h.state("team/b") == (AdmissionState.QUEUED, 0)
    h.stopped("team/a")
    h.decide()
    assert h.state("team/b") == (AdmissionState.ADMITTED, 6)


def test_an_elastic_job_never_preempts_itself_to_grow() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "fixed", 4, queued_s=1))
    h.submit(record("team", "elastic", 10, least=3, queued_s=2))
    for _ in range(3):
        decisions = h.decide()
        assert all(d.admission.state is AdmissionState.ADMITTED for d in decisions)
    record_now = h.queues.jobs["team/elastic"].admission
    assert (record_now.state, record_now.admitted, record_now.preemptions) == (
        AdmissionState.ADMITTED,
        6,
        0,
    )
    assert "no job it may preempt" in record_now.reason


def test_growing_elastic_jobs_of_one_priority_do_not_take_turns_preempting() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "first", 10, least=1, queued_s=1))
    h.decide()
    assert h.state("team/first") == (AdmissionState.ADMITTED, 10)
    # A job waiting to start takes an elastic job's extra tasks...
    h.submit(record("team", "second", 10, least=1, queued_s=2))
    h.decide()
    assert h.state("team/first") == (AdmissionState.PREEMPTING, 1)
    for _ in range(4):
        h.stopped("team/first")
        h.decide()
    # ... and then each grows only as quota frees: neither takes the other's tasks back.
    assert h.state("team/first") == (AdmissionState.ADMITTED, 1)
    assert h.state("team/second") == (AdmissionState.ADMITTED, 9)
    assert h.queues.jobs["team/second"].admission.preemptions == 0
    assert h.queues.jobs["team/first"].admission.preemptions == 1
