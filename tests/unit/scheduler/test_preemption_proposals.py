"""Preemption proposals and the allocator's answer: the candidates a proposal offers, the tasks
each stops as the allocator reads them, the victims the machines need completed for the quota,
refusals (the machines, the budget, a side's fair share) noted on the head, a proposal an
earlier one overtook, and the delay before a refused head is proposed again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from tests.unit.scheduler.test_admission_queues import (
    NOW,
    Harness,
    ent,
    fair_share_tree,
    preempted,
    record,
)
from tether.model import PreemptionPolicy
from tether.model.admission import AdmissionState
from tether.scheduler.admission.proposals import Proposal
from tether.scheduler.admission.queues import PLACEMENT_RECHECK, Refusal
from tether.scheduler.admission.victims import CANDIDATE_LIMIT, Candidate


def four_small_jobs(harness: Harness) -> None:
    """Four 1-task jobs fill team (4 CPUs), admitted a second apart."""
    for number in range(4):
        harness.submit(record("team", f"low{number}", 1, priority=50, queued_s=number))
        harness.decide(NOW + timedelta(seconds=number))
    for number in range(4):
        harness.stopped(f"team/low{number}")


def four_small_jobs_and_an_urgent_one(harness: Harness, tasks: int = 1) -> Proposal:
    """The four small jobs, then an urgent job of `tasks` tasks: the pass's one proposal."""
    four_small_jobs(harness)
    harness.submit(record("team", "urgent", tasks, priority=100, queued_s=10))
    outcome = harness.queues.decide(NOW + timedelta(seconds=10))
    [proposal] = outcome.proposals
    return proposal


def rule_of(harness: Harness, proposal: Proposal, chosen: Sequence[int]) -> str:
    """The rule that refuses the victims the machines need (chosen), or "" if none does."""
    victims = harness.queues.victims(proposal, chosen)
    return victims.rule if isinstance(victims, Refusal) else ""


def preempting(harness: Harness) -> set[str]:
    return set(preempted(harness, "team"))


def test_a_proposal_offers_every_candidate_in_order_and_leaves_the_tree_as_it_was() -> None:
    h = Harness(ent("team", 4))
    four_small_jobs(h)
    use = h.queues.tree.nodes["team"].consumption
    h.submit(record("team", "urgent", 1, priority=100, queued_s=10))
    [proposal] = h.queues.decide(NOW + timedelta(seconds=10)).proposals
    # The newest goes first (the least work lost); the quota alone needs only it.
    assert [c.job for c in proposal.candidates] == [f"team/low{n}" for n in (3, 2, 1, 0)]
    assert [victim.job for victim in proposal.promised] == ["team/low3"]
    assert (proposal.placing, proposal.budget) == ([0], 120)
    assert h.queues.tree.nodes["team"].consumption == use


def test_the_tasks_stopped_count_down_a_job_offered_more_than_once() -> None:
    def taking(take: int, rank: tuple[object, ...]) -> Candidate:
        return Candidate("team/elastic", "team", (1,), frees=take, take=take, rank=rank)

    offered = [taking(2, (0, 50)), taking(3, (1, 50)), taking(1, (1, 70))]
    proposal = Proposal("team/head", (2,), offered, budget=10)
    # Admitted 6: the first stops tasks 4 and up, the second (with the first) 1 and up, the
    # third 0 and up; tiers are the ranks' kind and priority, numbered from 0.
    stopping = proposal.stopping(lambda handle: 6)
    assert stopping == [("team/elastic", 4, 0), ("team/elastic", 1, 1), ("team/elastic", 0, 2)]
    # A later candidate of a job stops with the earlier ones.
    assert proposal.with_earlier([1]) == offered[:2]
    assert proposal.with_earlier([0]) == offered[:1]


def test_the_victims_the_machines_need_are_preempted_and_no_more_when_they_are_enough() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h)
    # The machines need low1 and low2 (positions 2 and 1), where the quota alone took low3.
    h.preempt(proposal, NOW, chosen=[1, 2])
    assert preempting(h) == {"team/low1", "team/low2"}
    assert "preempting 2 task(s)" in h.queues.jobs["team/urgent"].admission.reason


def test_the_quota_adds_to_the_victims_the_machines_need_what_they_do_not_free() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h, tasks=2)
    # The machines need low0 (the last candidate); the quota needs a second task: the first
    # in order, low3.
    h.preempt(proposal, NOW, chosen=[3])
    assert preempting(h) == {"team/low0", "team/low3"}


def test_victims_beyond_the_budget_are_refused_and_noted() -> None:
    h = Harness(ent("team", 4, preemption=PreemptionPolicy(max_per_minute=2)))
    proposal = four_small_jobs_and_an_urgent_one(h)
    assert proposal.budget == 2
    assert rule_of(h, proposal, [0, 1, 2]) == "rate-limit"
    h.preempt(proposal, NOW, chosen=[0, 1, 2])
    assert preempting(h) == set()
    assert "would stop more than 2 task(s)" in h.queues.jobs["team/urgent"].admission.reason


def test_victims_that_would_take_a_side_below_its_fair_share_are_refused() -> None:
    # org's 20 CPUs: a and x hold 8 each in one-task jobs, borrowed; b's 5-task job is fairly
    # owed (8 + 8 + 0) / 3 of 20, and each of a and x keeps as much. Any one of a's jobs may go,
    # but not five of them.
    h = Harness(ent("org", 20), *(ent(name, 0, "org", borrowing=20) for name in "axb"))
    for side in "ax":
        for index in range(8):
            h.submit(record(side, f"{side}{index}", 1, queued_s=index))
    h.decide()
    h.submit(record("b", "job", 5, queued_s=100))
    [proposal] = h.queues.decide(NOW).proposals
    mine = [p for p, candidate in enumerate(proposal.candidates) if candidate.entitlement == "a"]
    assert rule_of(h, proposal, mine[:5]) == "fair-share"
    h.preempt(proposal, NOW, chosen=mine[:5])
    assert preempted(h, "a") == {}
    assert "would take a below its fair share" in h.queues.jobs["b/job"].admission.reason
    assert h.state("b/job") == (AdmissionState.QUEUED, 0)


def test_a_fair_share_preemption_stops_no_more_than_it_starts() -> None:
    # a holds all 12 CPUs of org; b's 3-task job may take 3 of a's, not 4.
    h = fair_share_tree("b")
    [proposal] = h.queues.decide(NOW).proposals
    assert rule_of(h, proposal, range(4)) == "cost"
    h.preempt(proposal, NOW, chosen=range(4))
    assert preempted(h, "a") == {}
    assert "would stop 1.3 times what it starts" in h.queues.jobs["b/job"].admission.reason
    assert rule_of(h, proposal, range(3)) == ""
    h.preempt(proposal, NOW, chosen=range(3))
    assert len(preempted(h, "a")) == 3


def test_a_refusal_is_noted_on_the_head_and_preempts_nothing() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h)
    refusal = h.queues.placement_refusal(proposal, "no machine fits: 2 of 2 machines: gpus")
    assert refusal.rule == "placement"
    decisions = h.queues.refuse(proposal, refusal, NOW)
    assert [decision.admission.job for decision in decisions] == ["team/urgent"]
    reason = h.queues.jobs["team/urgent"].admission.reason
    assert "preempting would not help: its tasks would not fit the machines" in reason
    assert "team/low0, team/low1, team/low2 and 1 more" in reason
    assert reason.endswith("no machine fits: 2 of 2 machines: gpus")
    assert all(h.state(f"team/low{number}") == (AdmissionState.ADMITTED, 1) for number in range(4))


def test_a_proposal_loses_the_candidates_an_earlier_one_preempted() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h)
    assert h.queues.standing(proposal) is proposal
    earlier = Proposal("team/urgent", proposal.demand, proposal.candidates, 120)
    h.queues.preempt(earlier, proposal.candidates[:1], NOW)
    standing = h.queues.standing(proposal)
    assert standing is not None
    assert [c.job for c in standing.candidates] == ["team/low2", "team/low1", "team/low0"]
    assert standing.promised == []
    h.queues.preempt(earlier, proposal.candidates[1:], NOW)
    assert h.queues.standing(proposal) is None


def test_the_candidates_offered_are_bounded() -> None:
    h = Harness(ent("team", CANDIDATE_LIMIT + 10))
    for number in range(CANDIDATE_LIMIT + 10):
        h.submit(record("team", f"low{number}", 1, priority=50, queued_s=number))
    h.decide()
    for number in range(CANDIDATE_LIMIT + 10):
        h.stopped(f"team/low{number}")
    h.submit(record("team", "urgent", 1, priority=100, queued_s=100))
    [proposal] = h.queues.decide(NOW + timedelta(seconds=100)).proposals
    assert len(proposal.candidates) == CANDIDATE_LIMIT
    assert set(proposal.promised) <= set(proposal.candidates)


def test_a_refused_head_is_proposed_again_only_after_the_recheck_delay() -> None:
    h = Harness(ent("team", 4))
    proposal = four_small_jobs_and_an_urgent_one(h)
    refused_at = NOW + timedelta(seconds=10)
    h.queues.refuse(proposal, Refusal("placement", "no machine fits"), refused_at)
    # The urgent job is still blocked: passes within the delay propose nothing for it.
    assert h.queues.decide(refused_at + PLACEMENT_RECHECK / 2).proposals == []
    [again] = h.queues.decide(refused_at + PLACEMENT_RECHECK).proposals
    assert again.head == "team/urgent"
