"""Preemption proposals and the placement check's answer: the spare victims a proposal offers,
the tasks it stops as the allocator reads them, a refusal noted on the head, spare victims
preempted when the check needs them, a proposal an earlier one overtook, and the delay before
a refused head is proposed again."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.scheduler.test_admission_queues import NOW, Harness, ent, record
from tether.model import PreemptionPolicy
from tether.model.admission import AdmissionState
from tether.scheduler.admission.proposals import Proposal
from tether.scheduler.admission.queues import PLACEMENT_RECHECK
from tether.scheduler.admission.victims import SPARE_LIMIT, Candidate


def four_small_jobs(harness: Harness) -> None:
    """Four 1-task jobs fill team (4 CPUs), admitted a second apart."""
    for number in range(4):
        harness.submit(record("team", f"low{number}", 1, priority=50, queued_s=number))
        harness.decide(NOW + timedelta(seconds=number))
    for number in range(4):
        harness.stopped(f"team/low{number}")


def four_small_jobs_and_an_urgent_one(harness: Harness) -> Proposal:
    """The four small jobs, then an urgent 1-task job: the pass's one proposal."""
    four_small_jobs(harness)
    harness.submit(record("team", "urgent", 1, priority=100, queued_s=10))
    outcome = harness.queues.decide(NOW + timedelta(seconds=10))
    [proposal] = outcome.proposals
    return proposal


def test_a_proposal_offers_the_next_candidates_as_spare_and_leaves_the_tree_as_it_was() -> None:
    h = Harness(ent("team", 4))
    four_small_jobs(h)
    use = h.queues.tree.nodes["team"].consumption
    h.submit(record("team", "urgent", 1, priority=100, queued_s=10))
    [proposal] = h.queues.decide(NOW + timedelta(seconds=10)).proposals
    # The newest goes first; the others, newest first, are spare.
    assert [victim.job for victim in proposal.freed] == ["team/low3"]
    assert [spare.job for spare in proposal.spare] == ["team/low2", "team/low1", "team/low0"]
    assert proposal.placing == [0]
    assert h.queues.tree.nodes["team"].consumption == use


def test_spare_victims_stay_within_the_preemption_budget() -> None:
    h = Harness(ent("team", 4, preemption=PreemptionPolicy(max_per_minute=2)))
    proposal = four_small_jobs_and_an_urgent_one(h)
    assert sum(victim.frees for victim in [*proposal.freed, *proposal.spare]) == 2


def test_the_tasks_stopped_count_down_a_job_taken_more_than_once() -> None:
    def taking(take: int) -> Candidate:
        return Candidate("team/elastic", "team", (1,), frees=take, take=take, rank=(take,))

    proposal = Proposal("team/head", (2,), [taking(2)], [0, 1], [taking(3), taking(1)])
    victims, spare = proposal.stopped(lambda handle: 6)
    # Admitted 6: the victims stop tasks 4 and up, the spare then 1 and up, then 0 and up.
    assert victims == [("team/elastic", 4)]
    assert spare == [("team/elastic", 1), ("team/elastic", 0)]


def test_a_refusal_is_noted_on_the_head_and_preempts_nothing() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h)
    decisions = h.queues.refuse(proposal, "no machine fits: 2 of 2 machines: gpus", NOW)
    assert [decision.admission.job for decision in decisions] == ["team/urgent"]
    reason = h.queues.jobs["team/urgent"].admission.reason
    assert "preempting would not help: its tasks would not fit the machines" in reason
    assert reason.endswith("no machine fits: 2 of 2 machines: gpus")
    assert all(h.state(f"team/low{number}") == (AdmissionState.ADMITTED, 1) for number in range(4))


def test_the_spare_victims_the_check_needs_are_preempted_with_the_others() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h)
    h.queues.preempt(proposal, NOW, spare=2)
    preempting = {f"team/low{n}" for n in (3, 2, 1)}
    for number in range(4):
        handle = f"team/low{number}"
        expected = AdmissionState.PREEMPTING if handle in preempting else AdmissionState.ADMITTED
        assert h.state(handle)[0] is expected
    assert "preempting 3 task(s)" in h.queues.jobs["team/urgent"].admission.reason


def test_a_proposal_whose_victim_an_earlier_one_took_no_longer_stands() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h)
    assert h.queues.current(proposal)
    earlier = proposal.with_spare(len(proposal.spare))
    h.queues.preempt(Proposal("team/urgent", proposal.demand, earlier.freed[1:]), NOW)
    assert h.queues.current(proposal)
    h.queues.preempt(Proposal("team/urgent", proposal.demand, earlier.freed[:1]), NOW)
    assert not h.queues.current(proposal)


def test_spare_victims_are_bounded() -> None:
    h = Harness(ent("team", SPARE_LIMIT + 10))
    for number in range(SPARE_LIMIT + 10):
        h.submit(record("team", f"low{number}", 1, priority=50, queued_s=number))
    h.decide()
    for number in range(SPARE_LIMIT + 10):
        h.stopped(f"team/low{number}")
    h.submit(record("team", "urgent", 1, priority=100, queued_s=100))
    [proposal] = h.queues.decide(NOW + timedelta(seconds=100)).proposals
    assert len(proposal.spare) == SPARE_LIMIT


def test_a_head_refused_by_placement_is_proposed_again_only_after_the_recheck_delay() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h)
    refused_at = NOW + timedelta(seconds=10)
    h.queues.refuse(proposal, "no machine fits", refused_at)
    # The urgent job is still blocked: passes within the delay propose nothing for it.
    assert h.queues.decide(refused_at + PLACEMENT_RECHECK / 2).proposals == []
    [again] = h.queues.decide(refused_at + PLACEMENT_RECHECK).proposals
    assert again.head == "team/urgent"
