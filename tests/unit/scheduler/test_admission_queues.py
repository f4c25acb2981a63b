"""Admission queues: order, admission whole or elastic, borrowing in fair-share order,
preemption and requeueing, and the victims chosen (unit and property-based)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.model import Entitlement, PreemptionPolicy, Quota, Resources
from tether.model.admission import (
    Admission,
    AdmissionEventKind,
    AdmissionState,
    PreemptionCause,
)
from tether.model.quota_tree import QuotaTree
from tether.scheduler.admission.proposals import Proposal
from tether.scheduler.admission.queued import QueuedJob
from tether.scheduler.admission.queues import AdmissionQueues, Decision
from tether.scheduler.admission.victims import Candidate, choose_victims

NOW = datetime(2030, 1, 1, tzinfo=UTC)
PROTECTED = 500


def cpus(amount: int) -> Resources:
    return Resources(cpu=amount)


def ent(name: str, cpu: int, parent: str | None = None, **fields: Any) -> Entitlement:
    borrowing = fields.pop("borrowing", 0)
    return Entitlement(
        name=name,
        parent=parent,
        quota=Quota(resources=cpus(cpu)),
        borrowing_limit=cpus(borrowing),
        **fields,
    )


def record(
    entitlement: str,
    name: str,
    tasks: int,
    *,
    priority: int = 100,
    queued_s: float = 0,
    least: int | None = None,
    deadline_s: float | None = None,
) -> Admission:
    at = NOW + timedelta(seconds=queued_s)
    return Admission(
        job=f"{entitlement}/{name}",
        priority=priority,
        start_deadline=None if deadline_s is None else NOW + timedelta(seconds=deadline_s),
        queued_at=at,
        task_resources=cpus(1),
        tasks=tasks,
        least_tasks=tasks if least is None else least,
        updated_at=at,
    )


class Harness:
    """Queues over a tree, with each decision written back as the store would."""

    def __init__(self, *entitlements: Entitlement) -> None:
        self.queues = AdmissionQueues(entitlements, PROTECTED)
        self.revision = 1

    def submit(self, admission: Admission) -> None:
        entitlement = admission.job.split("/")[0]
        self.queues.put(QueuedJob(entitlement, admission, self.revision, holding=0))

    def decide(self, now: datetime = NOW) -> list[Decision]:
        outcome = self.queues.decide(now)
        decisions = list(outcome.decisions)
        for proposal in outcome.proposals:
            decisions += self.preempt(proposal, now)
        self.revision += 1
        return decisions

    def preempt(
        self, proposal: Proposal, now: datetime, chosen: Sequence[int] = ()
    ) -> list[Decision]:
        """What the decider does with a proposal, the allocator having found that the machines
        need the candidates at `chosen` stopped (none: machines are plenty)."""
        standing = self.queues.standing(proposal)
        if standing is None:
            return []
        return self.queues.answer(standing, chosen, "", now)[0]

    def state(self, handle: str) -> tuple[AdmissionState, int]:
        admission = self.queues.jobs[handle].admission
        return admission.state, admission.admitted

    def stopped(self, handle: str) -> None:
        """The job's tasks beyond its admission have stopped."""
        self._holding(handle, self.queues.jobs[handle].admission.admitted)

    def suspend(self, handle: str, suspended: bool = True) -> None:
        """The job's spec says it is suspended (or no longer)."""
        job = self.queues.jobs[handle]
        self.queues.put(
            QueuedJob(job.entitlement, job.admission, job.revision, job.holding, False, suspended)
        )

    def finish(self, handle: str) -> None:
        self._holding(handle, 0)

    def _holding(self, handle: str, tasks: int) -> None:
        job = self.queues.jobs[handle]
        self.queues.put(
            QueuedJob(job.entitlement, job.admission, job.revision, tasks, False, job.suspended)
        )


def test_jobs_are_admitted_whole_in_order_as_quota_frees() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "first", 6, queued_s=1))
    h.submit(record("team", "second", 6, queued_s=2))
    h.submit(record("team", "small", 1, queued_s=3))
    h.decide()
    assert h.state("team/first") == (AdmissionState.ADMITTED, 6)
    # The head does not fit: nothing behind it overtakes it.
    assert h.state("team/second") == (AdmissionState.QUEUED, 0)
    assert h.state("team/small") == (AdmissionState.QUEUED, 0)
    assert "not enough quota for 6 task(s): cpu: need 6 millicores, 4 free" in (
        h.queues.jobs["team/second"].admission.reason
    )
    h.finish("team/first")
    h.decide()
    assert h.state("team/second") == (AdmissionState.ADMITTED, 6)
    assert h.state("team/small") == (AdmissionState.ADMITTED, 1)


def test_order_is_priority_then_start_deadline_then_submission() -> None:
    h = Harness(ent("team", 1))
    h.submit(record("team", "early", 1, queued_s=1))
    h.submit(record("team", "deadline-late", 1, queued_s=2, deadline_s=900))
    h.submit(record("team", "deadline-soon", 1, queued_s=3, deadline_s=60))
    h.submit(record("team", "urgent", 1, queued_s=4, priority=200))
    order = []
    for _ in range(4):
        decided = [
            d.admission.job for d in h.decide() if d.admission.state is AdmissionState.ADMITTED
        ]
        order += decided
        for handle in decided:
            h.finish(handle)
    assert order == ["team/urgent", "team/deadline-soon", "team/deadline-late", "team/early"]


def test_an_elastic_job_starts_with_what_fits_and_grows_after_the_queue() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "fixed", 4, queued_s=1))
    h.submit(record("team", "elastic", 10, least=3, queued_s=2))
    h.decide()
    assert h.state("team/elastic") == (AdmissionState.ADMITTED, 6)
    h.submit(record("team", "later", 2, queued_s=3))
    h.finish("team/fixed")
    h.decide()
    # The job still waiting to start goes before the elastic job grows.
    assert h.state("team/later") == (AdmissionState.ADMITTED, 2)
    assert h.state("team/elastic") == (AdmissionState.ADMITTED, 8)


def admitted_tasks(h: Harness, entitlement: str) -> int:
    jobs = h.queues.jobs.values()
    return sum(job.admission.admitted for job in jobs if job.entitlement == entitlement)


@pytest.mark.parametrize(("weight", "expected"), [(1, (6, 6)), (2, (8, 4))])
def test_siblings_share_idle_quota_by_weighted_dominant_share(
    weight: int, expected: tuple[int, int]
) -> None:
    h = Harness(
        ent("org", 12),
        ent("a", 4, "org", borrowing=8, weight=weight),
        ent("b", 4, "org", borrowing=8),
        ent("c", 4, "org"),
    )
    for index in range(8):
        h.submit(record("a", f"a{index}", 1, queued_s=index))
        h.submit(record("b", f"b{index}", 1, queued_s=index))
    h.decide()
    # c's idle quota goes to a and b until their dominant shares divided by weights meet.
    assert (admitted_tasks(h, "a"), admitted_tasks(h, "b")) == expected
    assert not h.queues.tree.over_quota()


def test_a_higher_priority_job_preempts_the_lowest_and_newest_then_the_victim_requeues() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "old", 5, priority=50, queued_s=1))
    h.decide(NOW)
    h.submit(record("team", "new", 5, priority=50, queued_s=2))
    h.decide(NOW + timedelta(seconds=10))
    for handle in ("team/old", "team/new"):
        h.stopped(handle)
    h.submit(record("team", "urgent", 5, priority=100, queued_s=3))
    decisions = h.decide(NOW + timedelta(seconds=20))
    # Least work lost: the job admitted last goes.
    assert h.state("team/new") == (AdmissionState.PREEMPTING, 0)
    assert h.state("team/old") == (AdmissionState.ADMITTED, 5)
    victim = h.queues.jobs["team/new"].admission
    assert victim.preempted_by == "team/urgent"
    assert victim.history[-1].kind is AdmissionEventKind.PREEMPTED
    assert any(
        d.admission.job == "team/urgent" and "preempting 5 task(s)" in d.admission.reason
        for d in decisions
    )
    # Nothing is admitted until the victim's tasks have stopped.
    h.decide(NOW + timedelta(seconds=21))
    assert h.state("team/urgent") == (AdmissionState.QUEUED, 0)
    h.stopped("team/new")
    h.decide(NOW + timedelta(seconds=30))
    assert h.state("team/urgent") == (AdmissionState.ADMITTED, 5)
    requeued = h.queues.jobs["team/new"].admission
    assert (requeued.state, requeued.queued_at) == (
        AdmissionState.QUEUED,
        NOW + timedelta(seconds=2),
    )
    assert requeued.history[-1].kind is AdmissionEventKind.REQUEUED
    assert requeued.preemptions == 1


def test_a_suspended_job_stops_with_notice_and_resumes_at_its_place() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "gavel", 6, queued_s=1))
    h.decide()
    h.stopped("team/gavel")
    h.suspend("team/gavel")
    h.decide(NOW + timedelta(seconds=10))
    suspended = h.queues.jobs["team/gavel"].admission
    assert (suspended.state, suspended.admitted) == (AdmissionState.PREEMPTING, 0)
    assert suspended.history[-1].cause is PreemptionCause.SUSPENDED
    assert suspended.preempted_by is None
    # Suspending is the owner's choice: not counted against the preemption rate limit.
    assert suspended.preempted_at == []
    # Its tasks hold the quota until they stop; then it waits, suspended, holding none.
    h.submit(record("team", "later", 6, queued_s=2))
    h.decide(NOW + timedelta(seconds=11))
    assert h.state("team/later") == (AdmissionState.QUEUED, 0)
    h.stopped("team/gavel")
    h.decide(NOW + timedelta(seconds=12))
    assert h.state("team/gavel") == (AdmissionState.QUEUED, 0)
    assert h.queues.jobs["team/gavel"].admission.reason == "suspended"
    assert h.state("team/later") == (AdmissionState.ADMITTED, 6)
    # Resumed with room for one of them, it goes first: it kept its place.
    h.submit(record("team", "latest", 4, queued_s=3))
    h.finish("team/later")
    h.suspend("team/gavel", False)
    h.decide(NOW + timedelta(seconds=13))
    assert h.state("team/gavel") == (AdmissionState.ADMITTED, 6)
    assert h.state("team/latest") == (AdmissionState.ADMITTED, 4)


def test_a_job_suspended_while_queued_is_never_admitted() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "held", 2, queued_s=1))
    h.suspend("team/held")
    h.submit(record("team", "other", 2, queued_s=2))
    h.decide()
    assert h.state("team/held") == (AdmissionState.QUEUED, 0)
    assert h.state("team/other") == (AdmissionState.ADMITTED, 2)


def test_equal_priority_and_the_protected_band_are_never_preempted() -> None:
    h = Harness(ent("team", 10))
    h.submit(record("team", "prod", 5, priority=PROTECTED, queued_s=1))
    h.submit(record("team", "peer", 5, priority=600, queued_s=2))
    h.decide()
    h.submit(record("team", "top", 5, priority=1000, queued_s=3))
    h.submit(record("team", "same", 5, priority=600, queued_s=4))
    h.decide()
    assert h.state("team/prod") == (AdmissionState.ADMITTED, 5)
    assert h.state("team/peer") == (AdmissionState.ADMITTED, 5)


def test_an_owner_reclaims_lent_quota_from_a_borrower_of_any_priority() -> None:
    h = Harness(ent("org", 10), ent("lender", 5, "org"), ent("borrower", 5, "org", borrowing=5))
    h.submit(record("borrower", "big", 8, priority=400, queued_s=1))
    h.decide()
    assert h.state("borrower/big") == (AdmissionState.ADMITTED, 8)
    h.stopped("borrower/big")
    h.submit(record("lender", "own", 4, priority=10, queued_s=2))
    h.decide()
    assert h.state("borrower/big") == (AdmissionState.PREEMPTING, 0)


def test_preemption_is_rate_limited_per_entitlement_and_per_job() -> None:
    policy = PreemptionPolicy(max_per_minute=5, max_per_job_per_hour=1)
    h = Harness(ent("team", 10, preemption=policy))
    h.submit(record("team", "wide", 10, priority=1))
    h.decide()
    h.stopped("team/wide")
    h.submit(record("team", "high", 10, priority=2))
    h.decide()
    # Its 10 tasks would exceed the 5 a minute the entitlement may preempt.
    assert h.state("team/wide") == (AdmissionState.ADMITTED, 10)
    h.finish("team/wide")
    h.decide()
    h.submit(record("team", "low", 4, priority=1, queued_s=5))
    h.decide()
    h.finish("team/high")
    h.decide()
    h.stopped("team/low")
    h.submit(record("team", "mid", 8, priority=3, queued_s=6))
    h.decide()
    assert h.state("team/low") == (AdmissionState.PREEMPTING, 0)
    h.stopped("team/low")
    later = NOW + timedelta(minutes=2)
    h.decide(later)
    # Requeued, and admitted again once "mid" ends; then not preempted twice in an hour.
    h.finish("team/mid")
    h.decide(later)
    assert h.state("team/low") == (AdmissionState.ADMITTED, 4)
    h.stopped("team/low")
    h.submit(record("team", "mid2", 8, priority=3, queued_s=7))
    h.decide(later + timedelta(minutes=1))
    assert h.state("team/low") == (AdmissionState.ADMITTED, 4)
    assert h.state("team/mid2") == (AdmissionState.QUEUED, 0)


@st.composite
def preemption_cases(draw: st.DrawFn) -> tuple[QuotaTree, list[Candidate], int]:
    quota = draw(st.integers(1, 40))
    tree = QuotaTree([ent("team", quota)])
    one = tree.vector(cpus(1))
    assert one is not None
    candidates = []
    used = 0
    for index in range(draw(st.integers(0, 8))):
        tasks = draw(st.integers(1, 10))
        if used + tasks > quota:
            break
        used += tasks
        tree.use("team", tuple(d * tasks for d in one))
        rank = (draw(st.integers(0, 3)), index)
        candidates.append(Candidate(f"team/j{index}", "team", one, tasks, tasks, rank))
    candidates.sort(key=lambda candidate: candidate.rank)
    return tree, candidates, draw(st.integers(1, quota))


@settings(max_examples=300, deadline=None)
@given(case=preemption_cases(), budget=st.integers(0, 50))
def test_victims_make_room_and_none_could_be_spared(
    case: tuple[QuotaTree, list[Candidate], int], budget: int
) -> None:
    tree, candidates, wanted = case
    demand = tree.vector(cpus(wanted))
    assert demand is not None
    before = tree.nodes["team"].consumption
    victims = choose_victims(tree, "team", demand, candidates, budget)
    assert tree.nodes["team"].consumption == before
    if not victims:
        if tree.fits("team", demand):
            return
        # Nothing was chosen: then not even all of them together, within the budget, help.
        for candidate in candidates:
            tree.release("team", candidate.amount())
        assert not (sum(c.frees for c in candidates) <= budget and tree.fits("team", demand))
        return
    assert sum(v.frees for v in victims) <= budget
    for victim in victims:
        tree.release("team", victim.amount())
    assert tree.fits("team", demand)
    for victim in victims:
        tree.use("team", victim.amount())
        assert not tree.fits("team", demand), f"{victim.job} was not needed"
        tree.release("team", victim.amount())


def fair_share_tree(*waiting: str, priority: int = 100) -> Harness:
    """`a` holds all of org's 12 CPUs in one-task jobs, borrowed (no child is guaranteed
    anything); each of `waiting` then queues a 3-task job."""
    names = ("a", *waiting)
    h = Harness(ent("org", 12), *(ent(name, 0, "org", borrowing=12) for name in names))
    for index in range(12):
        h.submit(record("a", f"a{index:02d}", 1, priority=priority, queued_s=index))
    h.decide()
    for name in waiting:
        h.submit(record(name, "job", 3, queued_s=100))
    return h


def preempted(h: Harness, entitlement: str) -> dict[str, str]:
    """Its jobs being preempted -> the job they make room for."""
    return {
        handle: job.admission.preempted_by or ""
        for handle, job in h.queues.jobs.items()
        if job.entitlement == entitlement and job.admission.state is AdmissionState.PREEMPTING
    }


def test_a_borrower_below_its_fair_share_preempts_one_above_it_and_only_down_to_fair() -> None:
    h = fair_share_tree("b")
    h.decide()
    victims = preempted(h, "a")
    assert len(victims) == 3
    assert set(victims.values()) == {"b/job"}
    event = h.queues.jobs[next(iter(victims))].admission.history[-1]
    assert event.cause is PreemptionCause.FAIR_SHARE
    for handle in victims:
        h.stopped(handle)
    h.decide()
    assert h.state("b/job") == (AdmissionState.ADMITTED, 3)
    # b holds 3 of 12 and a 9: a second job would take b to 6, beyond the fair 6 of 12 less
    # the tolerance, so it waits for quota instead of preempting.
    h.submit(record("b", "second", 3, queued_s=200))
    h.decide()
    assert not preempted(h, "a")
    assert "no borrower holds more than its weighted fair share" in (
        h.queues.jobs["b/second"].admission.reason
    )


def test_fair_share_never_preempts_a_higher_priority_borrower() -> None:
    h = fair_share_tree("b", priority=200)
    h.decide()
    assert not preempted(h, "a")
    assert h.state("b/job") == (AdmissionState.QUEUED, 0)


def test_heads_preempting_in_one_pass_never_share_a_victim() -> None:
    h = fair_share_tree("b", "c")
    h.decide()
    victims = preempted(h, "a")
    # Each head got its own three: the second was planned as if the first had happened.
    assert sorted(victims.values()) == ["b/job"] * 3 + ["c/job"] * 3
    for handle in victims:
        h.stopped(handle)
    h.decide()
    assert h.state("b/job") == (AdmissionState.ADMITTED, 3)
    assert h.state("c/job") == (AdmissionState.ADMITTED, 3)
    assert not h.queues.tree.over_quota()
