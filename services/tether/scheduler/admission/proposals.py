"""A proposed preemption (pure): the candidates the allocator chooses among machine by machine,
the tasks each would stop as the allocator reads them, and a victim's record once preempted."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tether.model.admission import (
    Admission,
    AdmissionEvent,
    AdmissionEventKind,
    AdmissionState,
    PreemptionCause,
)
from tether.model.quota_tree import Vector
from tether.scheduler.admission.victims import Candidate

Stopping = tuple[str, int, int]
"""(job handle, first task index stopped, tier) per candidate: what the allocator's choice
reads. Lower tiers go first."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """Preempting some of `candidates` would let `head` be admitted with `demand` more: its tasks
    `placing`. Which of them must stop for those tasks to find machines is the allocator's to
    say, at most `budget` tasks in all; the quota may need more (`AdmissionQueues.victims`)."""

    head: str
    demand: Vector
    candidates: list[Candidate]
    budget: int
    placing: list[int] = field(default_factory=list)
    promised: list[Candidate] = field(default_factory=list)
    """The fewest candidates the quota alone needs: later proposals of the same pass are
    planned as if these went."""

    def stopping(self, admitted: Callable[[str], int]) -> list[Stopping]:
        """The tasks each candidate would stop, given each job's `admitted` tasks now: a job's
        tasks from its admission's size less what this and its earlier candidates take (a later
        candidate of a job goes only with the earlier ones: `with_earlier`)."""
        left = {candidate.job: admitted(candidate.job) for candidate in self.candidates}
        tiers = {
            tier: number for number, tier in enumerate(sorted({_tier(c) for c in self.candidates}))
        }
        stopping = []
        for candidate in self.candidates:
            left[candidate.job] -= candidate.take
            stopping.append((candidate.job, max(left[candidate.job], 0), tiers[_tier(candidate)]))
        return stopping

    def with_earlier(self, positions: Iterable[int]) -> list[Candidate]:
        """The candidates at `positions`, with every earlier candidate of the same jobs: the
        tasks a later one stops are counted from the earlier ones' (`stopping`)."""
        chosen = set(positions)
        last = {self.candidates[p].job: p for p in sorted(chosen)}
        return [
            candidate
            for position, candidate in enumerate(self.candidates)
            if position in chosen or last.get(candidate.job, -1) > position
        ]


def _tier(candidate: Candidate) -> tuple[object, ...]:
    """Elastic tasks above their job's minimum, then whole jobs; lower priorities first (the
    rank without its tie-breaks)."""
    return candidate.rank[:2]


def preempted(
    record: Admission, take: int, cause: PreemptionCause, head: str, now: datetime
) -> Admission:
    """The victim's record once `take` of its tasks are preempted for `head`."""
    event = AdmissionEvent(
        at=now,
        kind=AdmissionEventKind.PREEMPTED,
        detail=f"{take} task(s) preempted for {head}",
        tasks=take,
        by=head,
        cause=cause,
    )
    recent = [at for at in record.preempted_at if now - at < timedelta(hours=1)]
    return record.with_event(
        event,
        state=AdmissionState.PREEMPTING,
        admitted=max(record.admitted - take, 0),
        preempted_by=head,
        preemptions=record.preemptions + 1,
        preempted_at=[*recent, now],
        reason=f"preempted for {head}",
    )
