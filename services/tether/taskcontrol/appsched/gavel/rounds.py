"""The round-based scheduler's memory between rounds, which the simulator and the runner drive.

The active accelerator jobs and their progress, the allocation in force and the time each job
received under it; it never looks at a clock itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from tether.taskcontrol.appsched.gavel.mechanism import Ledger, Shares, choose, shares_of
from tether.taskcontrol.appsched.gavel.policies.registry import Policy
from tether.taskcontrol.appsched.gavel.problem import AcceleratorJob, Problem

ROUND_S = 360.0
"""Gavel's round: long enough that restarts cost little, short enough to follow arrivals."""
THROUGHPUT_CHANGE = 0.1
"""A measured throughput this far (relative) from the one the allocation assumed calls for a
new allocation."""


@dataclass
class ActiveJob:
    """A job the scheduler runs until it has made `total_steps` steps."""

    job: AcceleratorJob
    """Its name, gang, weight and entity, and its throughputs from the profile."""
    total_steps: float
    arrived_s: float
    steps_done: float = 0.0
    measured: dict[str, float] = field(default_factory=dict)
    """Accelerator type -> steps per second the job reported running there."""

    def throughputs(self) -> dict[str, float]:
        """The profile's throughputs corrected by what the job measured."""
        return {**self.job.throughputs, **self.measured}


class RoundScheduler:
    """Solves the policy when the active jobs change (at most once every `reallocate_every_s`)
    and chooses each round's jobs by `mechanism.choose`."""

    def __init__(
        self,
        policy: Policy,
        counts: Mapping[str, int],
        *,
        entity_weights: Mapping[str, float] | None = None,
        reallocate_every_s: float = 0.0,
    ) -> None:
        self.policy = policy
        self.counts = dict(counts)
        self.entity_weights = dict(entity_weights or {})
        self.reallocate_every_s = reallocate_every_s
        self.jobs: dict[str, ActiveJob] = {}
        self.ledger = Ledger()
        self.last_round: dict[str, str] = {}
        self.solves = 0
        """Policy solves so far."""
        self._stale = True
        self._solved_at_s: float | None = None

    def add(self, job: AcceleratorJob, total_steps: float, now_s: float) -> None:
        if job.name in self.jobs:
            raise ValueError(f"job {job.name} is already active")
        Problem.of([job], self.counts)  # refuses, naming it, what no policy can allocate
        if not any(
            rate > 0 and self.counts.get(kind, 0) >= job.scale_factor
            for kind, rate in job.throughputs.items()
        ):
            raise ValueError(
                f"job {job.name}: no accelerator type it runs on has {job.scale_factor} "
                f"accelerators (the region has {self.counts})"
            )
        self.jobs[job.name] = ActiveJob(job, total_steps, now_s)
        self._stale = True

    def remove(self, name: str) -> ActiveJob:
        """Forgets a job that finished or went away."""
        gone = self.jobs.pop(name)
        self.last_round.pop(name, None)
        self._stale = True
        return gone

    def count_accelerators(self, counts: Mapping[str, int]) -> None:
        """The accelerators of each type from now on (machines come and go)."""
        if dict(counts) != self.counts:
            self.counts = dict(counts)
            self._stale = True

    def weigh_entities(self, weights: Mapping[str, float]) -> None:
        """The entities' weights from now on (the hierarchical policy reads them)."""
        if dict(weights) != self.entity_weights:
            self.entity_weights = dict(weights)
            self._stale = True

    def report(self, name: str, steps_done: float, kind: str, seconds: float) -> None:
        """Job `name` has made `steps_done` steps in all, the last `seconds` of them on `kind`:
        its throughput there corrects the profile's (Gavel's feedback loop)."""
        active = self.jobs[name]
        made = steps_done - active.steps_done
        active.steps_done = steps_done
        if seconds <= 0 or made <= 0:
            return
        measured, assumed = made / seconds, active.throughputs().get(kind, 0.0)
        active.measured[kind] = measured
        if assumed <= 0 or abs(measured - assumed) > THROUGHPUT_CHANGE * assumed:
            self._stale = True

    def problem(self, now_s: float) -> Problem:
        """The active jobs, oldest first, as the policy sees them now."""
        ordered = sorted(self.jobs.values(), key=lambda active: (active.arrived_s, active.job.name))
        jobs = [
            dataclasses.replace(
                active.job,
                throughputs=active.throughputs(),
                remaining_steps=max(0.0, active.total_steps - active.steps_done),
                elapsed_s=max(0.0, now_s - active.arrived_s),
                running_on=self.last_round.get(active.job.name, ""),
            )
            for active in ordered
        ]
        return Problem.of(jobs, self.counts, self.entity_weights)

    def plan(self, now_s: float) -> dict[str, str]:
        """Job -> accelerator type for the round starting at `now_s`."""
        problem = self.problem(now_s)
        due = self._solved_at_s is None or now_s - self._solved_at_s >= self.reallocate_every_s
        if self._stale and due:
            allocation = self.policy(problem)
            self.solves += 1
            self.ledger.reset(shares_of(problem, allocation))
            self._stale, self._solved_at_s = False, now_s
        self.last_round = choose(problem, self.ledger, self.last_round)
        return dict(self.last_round)

    def record(self, ran: Mapping[str, str], seconds: float) -> None:
        """The jobs of `ran` held their accelerators for the `seconds` the round lasted."""
        self.ledger.record(ran, seconds)

    def received(self) -> Shares:
        """Job -> type -> the fraction of the time since the allocation was made that the job
        ran there (to compare with `allocation`)."""
        ledger = self.ledger
        return {
            job: {kind: ledger.share(job, kind) for kind in kinds}
            for job, kinds in ledger.received.items()
        }

    @property
    def allocation(self) -> Shares:
        """The allocation in force: job -> type -> fraction of time."""
        return self.ledger.allocation
