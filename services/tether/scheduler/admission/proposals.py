"""A proposed preemption (pure): the victims the quota needs, the spare ones the placement check
may add, the tasks they stop as the allocator reads them, and a victim's record once preempted."""

from __future__ import annotations

from collections.abc import Callable
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

Stopped = list[tuple[str, int]]
"""(job handle, first task index stopped) per victim: what the allocator's placement check
reads."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """Preempting `freed` would let `head` be admitted with `demand` more: its tasks `placing`.
    Whether they then find machines is the allocator's to say; if only with more gone, the
    first of `spare` are preempted too."""

    head: str
    demand: Vector
    freed: list[Candidate]
    placing: list[int] = field(default_factory=list)
    spare: list[Candidate] = field(default_factory=list)

    @property
    def victims(self) -> dict[str, int]:
        """Job handle -> tasks taken off its admission."""
        taken: dict[str, int] = {}
        for victim in self.freed:
            taken[victim.job] = taken.get(victim.job, 0) + victim.take
        return taken

    @property
    def tasks(self) -> int:
        """Tasks whose resources the preemption frees."""
        return sum(victim.frees for victim in self.freed)

    def with_spare(self, count: int) -> Proposal:
        """The proposal with its first `count` spare victims taken too."""
        if not count:
            return self
        freed = [*self.freed, *self.spare[:count]]
        return Proposal(self.head, self.demand, freed, self.placing)

    def stopped(self, admitted: Callable[[str], int]) -> tuple[Stopped, Stopped]:
        """The tasks the victims, then each spare, would stop, given each job's `admitted`
        tasks now: a job's tasks from its admission's new size on."""
        left = {victim.job: admitted(victim.job) for victim in [*self.freed, *self.spare]}

        def stop(victims: list[Candidate]) -> Stopped:
            stopped = []
            for victim in victims:
                left[victim.job] -= victim.take
                stopped.append((victim.job, max(left[victim.job], 0)))
            return stopped

        return stop(self.freed), stop(self.spare)


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
