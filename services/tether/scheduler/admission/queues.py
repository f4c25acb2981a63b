"""Entitlement trees' admission queues and the decisions on them, in memory and without I/O:
the scheduler's decider and the contention simulator run exactly this.

`put` and `remove` keep the state in step with the store (admission records, and how many
tasks each job holds); `decide` admits what fits, in order, requeues preempted jobs whose tasks
have stopped, and proposes preemptions for the heads that do not fit; once the allocator has
chosen the victims the machines need, `victims` completes them for the quota and `preempt`
carries the proposal out. Every decision is applied to the state at once, as
if already written: a caller whose write fails puts the stored records back.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from tether.model import Entitlement
from tether.model.admission import (
    Admission,
    AdmissionEvent,
    AdmissionEventKind,
    AdmissionState,
    PreemptionCause,
)
from tether.model.quota_tree import QuotaTree, Vector, neg
from tether.scheduler.admission.proposals import Proposal, Stopping, preempted
from tether.scheduler.admission.queued import QueuedJob
from tether.scheduler.admission.victims import (
    CANDIDATE_LIMIT,
    FAIR_SHARE_COST_LIMIT,
    Candidate,
    below_fair_share,
    candidates,
    choose_victims,
    fair_share_cost,
)

QueueKey = tuple[bool, int, float, float, str]

PLACEMENT_RECHECK = timedelta(seconds=5)
"""How long a head whose preemption the allocator refused (its tasks would not fit the
machines) waits before the victim search and the check run for it again: not every pass, each
one a search among the admitted jobs and a plan on the allocator."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A job's new admission record, to write if its key is still at `revision`."""

    admission: Admission
    revision: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a proposal's preemption does not go ahead: the rule in the way (`placement`,
    `rate-limit`, `cost`, `fair-share`) and the note for the head."""

    rule: str
    why: str


@dataclass(slots=True)
class Outcome:
    decisions: list[Decision] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)


class AdmissionQueues:
    """The queues of every entitlement of some trees, and what each job holds."""

    def __init__(self, entitlements: Iterable[Entitlement], non_preemptible_priority: int) -> None:
        self.non_preemptible_priority = non_preemptible_priority
        self.jobs: dict[str, QueuedJob] = {}
        self._charged: dict[str, tuple[str, Vector]] = {}
        self._waiting: defaultdict[str, list[tuple[QueueKey, str]]] = defaultdict(list)
        # Handle -> the key it is queued under: a job is pushed again only when its key
        # changes, and entries that no longer match are dropped as they reach the top.
        self._in_heap: dict[str, QueueKey] = {}
        self._preempting: set[str] = set()
        # Suspended jobs still admitted: stopped by the next pass.
        self._to_suspend: set[str] = set()
        # Entitlement -> its admitted jobs: the candidates for preemption, found without
        # reading every job waiting.
        self._admitted: defaultdict[str, set[str]] = defaultdict(set)
        # Entitlement -> (when, tasks) of the preemptions its jobs caused in the last minute.
        self._recent: defaultdict[str, deque[tuple[datetime, int]]] = defaultdict(deque)
        # Head -> when its preemption, refused by the placement check, may be proposed again.
        self._refused: dict[str, datetime] = {}
        self.tree = QuotaTree(entitlements)

    # --- keeping in step with the store ----------------------------------------------------

    def set_entitlements(self, entitlements: Iterable[Entitlement]) -> None:
        """A new tree (an entitlement was created, changed or deleted); charges every job
        again."""
        self.tree = QuotaTree(entitlements)
        self._charged.clear()
        self._waiting.clear()
        self._in_heap.clear()
        self._admitted.clear()
        for job in list(self.jobs.values()):
            self.put(job)

    def put(self, job: QueuedJob) -> None:
        """Adds or replaces a job."""
        self._uncharge(job.handle)
        self.jobs[job.handle] = job
        if job.entitlement not in self.tree.nodes:
            job.demand = None
            return
        job.demand = self.tree.vector(job.admission.task_resources)
        if job.demand is not None and job.holding:
            amount = tuple(d * job.holding for d in job.demand)
            self.tree.use(job.entitlement, amount)
            self._charged[job.handle] = (job.entitlement, amount)
        state = job.admission.state
        if state is AdmissionState.PREEMPTING:
            self._preempting.add(job.handle)
        else:
            self._preempting.discard(job.handle)
        if job.suspended and state is AdmissionState.ADMITTED:
            self._to_suspend.add(job.handle)
        else:
            self._to_suspend.discard(job.handle)
        if state is AdmissionState.ADMITTED:
            self._admitted[job.entitlement].add(job.handle)
        else:
            self._admitted[job.entitlement].discard(job.handle)
        key = job.admission.queue_key()
        if self._wants(job) and self._in_heap.get(job.handle) != key:
            heapq.heappush(self._waiting[job.entitlement], (key, job.handle))
            self._in_heap[job.handle] = key

    def remove(self, handle: str) -> None:
        self._uncharge(handle)
        self._preempting.discard(handle)
        self._to_suspend.discard(handle)
        self._refused.pop(handle, None)
        job = self.jobs.pop(handle, None)
        if job is not None:
            self._admitted[job.entitlement].discard(handle)

    # --- deciding --------------------------------------------------------------------------

    def decide(self, now: datetime) -> Outcome:
        """Requeues preempted jobs whose tasks have stopped, admits the queues' heads while
        they fit, and proposes preemptions for the heads that do not."""
        outcome = Outcome()
        owed = {
            by for handle in self._preempting if (by := self.jobs[handle].admission.preempted_by)
        }
        for handle in sorted(self._to_suspend):
            self._suspend(self.jobs[handle], now, outcome)
        for handle in sorted(self._preempting):
            self._settle_preempted(self.jobs[handle], now, outcome)
        blocked: dict[str, QueuedJob] = {}
        while (head := self._next_head(blocked, owed)) is not None:
            if not self._admit(head, now, outcome):
                blocked[head.entitlement] = head
        # Each proposal is planned as if the ones before it had happened: their victims
        # gone, their heads admitted. The tree is put back at the end.
        promised: list[tuple[str, Vector]] = []
        try:
            for head in sorted(blocked.values(), key=lambda job: job.admission.order()):
                if head.handle in owed:
                    self._note(head, "waiting for the tasks it preempted to stop", now, outcome)
                    continue
                if now < self._refused.get(head.handle, now):
                    continue  # its note says why it waits
                proposal = self._proposal(head, now, outcome.proposals)
                if isinstance(proposal, Proposal):
                    outcome.proposals.append(proposal)
                    promised += self._promise(proposal)
                else:
                    self._note(head, f"{self._why_waiting(head)}; {proposal}", now, outcome)
        finally:
            for entitlement, amount in reversed(promised):
                self.tree.release(entitlement, amount)
        return outcome

    def _promise(self, proposal: Proposal) -> list[tuple[str, Vector]]:
        """Shows the proposal's outcome in the tree; returns the changes (entitlement, amount
        used) that undo it when released."""
        changes = [(victim.entitlement, neg(victim.amount())) for victim in proposal.promised]
        changes.append((self.jobs[proposal.head].entitlement, proposal.demand))
        for entitlement, amount in changes:
            self.tree.use(entitlement, amount)
        return changes

    def standing(self, proposal: Proposal) -> Proposal | None:
        """The proposal without the candidates earlier proposals of the pass preempted, or None
        if none is left."""
        left = [
            candidate
            for candidate in proposal.candidates
            if (job := self.jobs.get(candidate.job)) is not None
            and job.admission.state is AdmissionState.ADMITTED
        ]
        if not left:
            return None
        if len(left) == len(proposal.candidates):
            return proposal
        promised = [victim for victim in proposal.promised if victim in left]
        return replace(proposal, candidates=left, promised=promised)

    def stopping(self, proposal: Proposal) -> list[Stopping]:
        """The tasks each of the proposal's candidates would stop, as the allocator reads them."""
        return proposal.stopping(lambda handle: self.jobs[handle].admission.admitted)

    def answer(
        self, proposal: Proposal, chosen: Sequence[int] | None, reason: str, now: datetime
    ) -> tuple[list[Decision], Refusal | None]:
        """Carries out the allocator's answer to a standing proposal: `chosen`, the candidates
        the machines need stopped, or None when the head's tasks fit no machine even with every
        candidate stopped (for `reason`). Returns the decisions, and the refusal if refused."""
        if chosen is None:
            victims: list[Candidate] | Refusal = self.placement_refusal(proposal, reason)
        else:
            victims = self.victims(proposal, chosen)
        if isinstance(victims, Refusal):
            return self.refuse(proposal, victims, now), victims
        return self.preempt(proposal, victims, now), None

    def placement_refusal(self, proposal: Proposal, reason: str) -> Refusal:
        """Why preempting would not help, when the head's tasks would fit no machine even with
        every candidate stopped (the allocator's `reason`)."""
        jobs = sorted({candidate.job for candidate in proposal.candidates})
        named = ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
        return Refusal(
            "placement",
            "preempting would not help: its tasks would not fit the machines even with the "
            f"tasks of {named} stopped: {reason}",
        )

    def victims(self, proposal: Proposal, chosen: Sequence[int]) -> list[Candidate] | Refusal:
        """The victims of a proposal: the candidates at `chosen` (those the allocator found the
        machines need, with the earlier candidates of their jobs), then the fewest more the
        quota needs; or why there are none that keep every rule."""
        head = self.jobs[proposal.head]
        pinned = proposal.with_earlier(chosen)
        victims = choose_victims(
            self.tree,
            head.entitlement,
            proposal.demand,
            proposal.candidates,
            proposal.budget,
            pinned,
        )
        if not victims:
            return Refusal(
                "rate-limit",
                "preempting would wait: the candidates the machines need, and as many more as "
                f"the quota needs, would stop more than {proposal.budget} task(s) or not make "
                "room",
            )
        cost = fair_share_cost(self.tree, head.entitlement, proposal.demand, victims)
        if cost > FAIR_SHARE_COST_LIMIT:
            return Refusal(
                "cost",
                f"preempting would wait: the victims the machines need would stop {cost:.1f} "
                f"times what it starts for fair share (at most {FAIR_SHARE_COST_LIMIT:g})",
            )
        side = below_fair_share(self.tree, victims)
        if side is not None:
            return Refusal(
                "fair-share",
                "preempting would wait: the victims the machines need would take "
                f"{side} below its fair share",
            )
        return victims

    def refuse(self, proposal: Proposal, refusal: Refusal, now: datetime) -> list[Decision]:
        """Notes on the head why preempting does not go ahead; it is not proposed again for
        PLACEMENT_RECHECK."""
        head = self.jobs[proposal.head]
        self._refused[head.handle] = now + PLACEMENT_RECHECK
        outcome = Outcome()
        self._note(head, f"{self._why_waiting(head)}; {refusal.why}", now, outcome)
        return outcome.decisions

    def preempt(
        self, proposal: Proposal, victims: Sequence[Candidate], now: datetime
    ) -> list[Decision]:
        """Marks the `victims` preempting (their tasks are stopped with notice), and notes on
        the head what it waits for."""
        head = self.jobs[proposal.head]
        taken: dict[str, int] = {}
        for victim in victims:
            taken[victim.job] = taken.get(victim.job, 0) + victim.take
        decisions = []
        causes = {victim.job: victim.cause for victim in victims}
        for handle, take in sorted(taken.items()):
            job = self.jobs[handle]
            changed = preempted(job.admission, take, causes[handle], proposal.head, now)
            decisions.append(self._apply(job, changed))
        tasks = sum(victim.frees for victim in victims)
        self._recent[head.entitlement].append((now, tasks))
        named = ", ".join(sorted(taken))
        reason = f"preempting {tasks} task(s) of {named}; admitted once they stop"
        outcome = Outcome()
        self._note(head, reason, now, outcome)
        return [*decisions, *outcome.decisions]

    # --- helpers ---------------------------------------------------------------------------

    def _wants(self, job: QueuedJob) -> bool:
        return not (job.closed or job.suspended) and job.admission.waits

    def _uncharge(self, handle: str) -> None:
        charged = self._charged.pop(handle, None)
        if charged is not None and charged[0] in self.tree.nodes:
            self.tree.release(*charged)

    def _apply(self, job: QueuedJob, record: Admission) -> Decision:
        decision = Decision(record, job.revision)
        holding = job.holding
        if record.state is AdmissionState.ADMITTED:
            holding = max(holding, record.admitted)
        self.put(
            QueuedJob(job.entitlement, record, job.revision, holding, job.closed, job.suspended)
        )
        return decision

    def _next_head(self, blocked: dict[str, QueuedJob], owed: set[str]) -> QueuedJob | None:
        """The next head to try: one owed the room it preempted for, then one that fits within
        its guarantee, then, among those that must borrow, the one whose subtree has the
        smallest weighted dominant share at the highest level where they differ."""
        heads = []
        for entitlement, heap in self._waiting.items():
            if entitlement in blocked:
                continue
            while heap:
                key, handle = heap[0]
                job = self.jobs.get(handle)
                if job is not None and self._wants(job) and key == job.admission.queue_key():
                    heads.append(job)
                    break
                heapq.heappop(heap)
                if self._in_heap.get(handle) == key:
                    del self._in_heap[handle]
        if not heads:
            return None
        return min(heads, key=lambda job: self._precedence(job, owed))

    def _precedence(self, job: QueuedJob, owed: set[str]) -> tuple[object, ...]:
        guaranteed = self._within_guarantee(job)
        shares = tuple(
            self.tree.dominant_share(node.name)
            for node in reversed(list(self.tree.path(job.entitlement)))
        )
        return (job.handle not in owed, not guaranteed, shares, job.admission.order())

    def _within_guarantee(self, job: QueuedJob) -> bool:
        """Whether the job's next step fits what its entitlement is guaranteed, were every
        other subtree to give back what it borrows."""
        asked = self._asked(job)
        if asked is None or job.demand is None:
            return False
        return self.tree.fits_guarantee(job.entitlement, tuple(d * asked for d in job.demand))

    def _asked(self, job: QueuedJob) -> int | None:
        """The fewest more tasks the job needs to make progress; None if it never can."""
        return None if job.demand is None else job.admission.asks

    def _admit(self, job: QueuedJob, now: datetime, outcome: Outcome) -> bool:
        asked = self._asked(job)
        if asked is None or job.demand is None:
            return False
        record = job.admission
        most = record.tasks - record.admitted
        room = self.tree.headroom(job.entitlement)
        fitting = min(
            (r // d for d, r in zip(job.demand, room, strict=True) if d > 0), default=most
        )
        more = min(fitting, most)
        if more < asked:
            return False
        admitted = record.admitted + more
        if record.state is AdmissionState.QUEUED:
            event = AdmissionEvent(
                at=now,
                kind=AdmissionEventKind.ADMITTED,
                detail=f"{admitted} task(s)",
                tasks=admitted,
            )
        else:
            event = AdmissionEvent(
                at=now,
                kind=AdmissionEventKind.RESIZED,
                detail=f"{record.admitted} -> {admitted} task(s)",
                tasks=more,
            )
        changed = record.with_event(
            event,
            state=AdmissionState.ADMITTED,
            admitted=admitted,
            admitted_at=now if record.state is AdmissionState.QUEUED else record.admitted_at,
            reason="",
        )
        outcome.decisions.append(self._apply(job, changed))
        return True

    def _suspend(self, job: QueuedJob, now: datetime, outcome: Outcome) -> None:
        """Stops a suspended job's tasks with notice, as a preemption does (no preemptor, and
        not counted against its preemption rate limit); it goes back to its queue, at its
        place, once they have stopped."""
        record = job.admission
        event = AdmissionEvent(
            at=now,
            kind=AdmissionEventKind.PREEMPTED,
            detail=f"{record.admitted} task(s) suspended",
            tasks=record.admitted,
            cause=PreemptionCause.SUSPENDED,
        )
        changed = record.with_event(
            event,
            state=AdmissionState.PREEMPTING,
            admitted=0,
            preempted_by=None,
            reason="suspended",
        )
        outcome.decisions.append(self._apply(job, changed))

    def _settle_preempted(self, job: QueuedJob, now: datetime, outcome: Outcome) -> None:
        """A preempted job goes back to its queue (or, shrunk, stays admitted) once no more
        tasks than it is admitted hold resources."""
        record = job.admission
        if job.holding > record.admitted:
            return
        if record.admitted:
            event = AdmissionEvent(
                at=now,
                kind=AdmissionEventKind.RESIZED,
                detail=f"shrunk to {record.admitted} task(s)",
            )
            changed = record.with_event(event, state=AdmissionState.ADMITTED, reason="")
        else:
            event = AdmissionEvent(at=now, kind=AdmissionEventKind.REQUEUED, by=record.preempted_by)
            reason = "suspended" if job.suspended else ""
            changed = record.with_event(
                event, state=AdmissionState.QUEUED, admitted_at=None, reason=reason
            )
        outcome.decisions.append(self._apply(job, changed))

    def _note(self, job: QueuedJob, reason: str, now: datetime, outcome: Outcome) -> None:
        """Records why the head waits, if that changed."""
        if job.admission.reason == reason:
            return
        changed = job.admission.model_copy(update={"reason": reason, "updated_at": now})
        outcome.decisions.append(self._apply(job, changed))

    def _why_waiting(self, job: QueuedJob) -> str:
        if job.demand is None:
            return f"its entitlement {job.entitlement} does not exist"
        asked = self._asked(job) or 0
        demand = tuple(d * asked for d in job.demand)
        short = "; ".join(self.tree.shortfall(job.entitlement, demand))
        return f"not enough quota for {asked} task(s): {short}"

    def _proposal(self, head: QueuedJob, now: datetime, earlier: list[Proposal]) -> Proposal | str:
        """The preemption that would let `head` in, or why preempting would not help."""
        asked = self._asked(head)
        if asked is None or head.demand is None:
            return "preempting would not help"
        entitlement = self.tree.nodes[head.entitlement].entitlement
        recent = self._recent[head.entitlement]
        while recent and now - recent[0][0] >= timedelta(minutes=1):
            recent.popleft()
        budget = entitlement.preemption.max_per_minute - sum(tasks for _, tasks in recent)
        if budget <= 0:
            return (
                f"preempting would wait: entitlement {head.entitlement} preempted its "
                f"{entitlement.preemption.max_per_minute} tasks of the last minute"
            )
        taken = {victim.job for proposal in earlier for victim in proposal.promised}
        # A job within its guarantee takes back what others borrowed; one that would borrow
        # itself only takes from borrowers above its weighted fair share.
        reclaims = self._within_guarantee(head)
        demand = tuple(d * asked for d in head.demand)
        found = candidates(
            self.tree,
            head,
            demand,
            lambda name: (
                self.jobs[handle] for handle in self._admitted.get(name, ()) if handle not in taken
            ),
            reclaims=reclaims,
            non_preemptible_priority=self.non_preemptible_priority,
            now=now,
        )
        if not found:
            return "preempting would not help: no job it may preempt (none of lower priority, " + (
                "and nobody borrows its quota)"
                if reclaims
                else "and no borrower holds more than its weighted fair share)"
            )
        victims = choose_victims(self.tree, head.entitlement, demand, found, budget)
        if not victims:
            return (
                f"preempting would not help: all {len(found)} candidate(s) together "
                f"(within {budget} tasks) would not make room"
            )
        # The quota's own choice is always offered, whatever the limit.
        offered = [*victims, *(c for c in found if c not in victims)][:CANDIDATE_LIMIT]
        offered.sort(key=lambda candidate: candidate.rank)
        placing = list(range(head.admission.admitted, head.admission.admitted + asked))
        return Proposal(head.handle, demand, offered, budget, placing, victims)
