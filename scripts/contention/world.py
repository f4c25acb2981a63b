"""The contention simulator's world: the scheduler's admission queues and the allocator's index
and planner, driven by a simulated clock. Nothing sleeps; nothing here decides for them."""

from __future__ import annotations

import heapq
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from contention.workload import (
    EPOCH,
    GPUS_PER_MACHINE,
    NON_PREEMPTIBLE_PRIORITY,
    Arrival,
    entitlements,
    machines,
    targets,
    team_names,
)
from tests.support.allocator_builders import Region
from tether.allocator.index import FREE
from tether.allocator.preemption import PreemptionCandidate, choose_preemption
from tether.model import Entitlement
from tether.model.admission import Admission, AdmissionEventKind, AdmissionState
from tether.scheduler.admission.proposals import Proposal
from tether.scheduler.admission.queued import QueuedJob
from tether.scheduler.admission.queues import AdmissionQueues, Decision

ARRIVE, FINISH, STOP = 0, 1, 2
"""Event kinds, in the order they are handled at one instant: a job that ends frees room for
one that arrives at that moment."""


@dataclass(slots=True)
class SimJob:
    """A job's life in the simulation."""

    arrival: Arrival
    remaining_s: float
    """Work left, in seconds on all its GPUs (a preempted job resumes from its checkpoint)."""
    rows: dict[int, int] = field(default_factory=dict)
    """Task index -> the index row of its machine, while placed."""
    running_since: float | None = None
    epoch: int = 0
    """Bumped when it stops early: its scheduled finish no longer holds."""
    stopping: bool = False
    admitted_s: float | None = None
    finished_s: float | None = None

    @property
    def handle(self) -> str:
        return self.arrival.job.handle


@dataclass(slots=True)
class Tally:
    """What the run measured, integrated over time where it is a share."""

    busy_gpu_s: float = 0.0
    measured_s: float = 0.0
    saturated_s: float = 0.0
    jain_s: float = 0.0
    """Integral of the Jain index of the teams' normalised shares over saturated time."""
    share_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    """Per team, the integral of its share of the region over saturated time."""
    preempted_jobs: int = 0
    preempted_tasks: int = 0
    preempted_by_cause: Counter[str] = field(default_factory=Counter)
    """Jobs preempted, by cause (priority, reclaim, fair-share)."""
    decide_ms: list[float] = field(default_factory=list)
    check_ms: list[float] = field(default_factory=list)
    """Each placement check of a proposal, as the allocator would take it."""
    refused: Counter[str] = field(default_factory=Counter)
    """Proposals not carried out, by the rule in the way (`Refusal.rule`): placement, their
    candidates all stopped would free no machines the preemptor fits; the others, the victims
    the machines need would break a quota rule."""
    over_quota: int = 0
    """Passes after which some entitlement held more than its quota and borrowing allow."""
    trace: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    """(time, team -> share) every sample, for the plot."""


class World:
    """A region of GPU machines, its entitlement tree, and jobs arriving over time."""

    def __init__(
        self,
        machine_count: int,
        guaranteed: float,
        *,
        deadline_aware: bool,
        warmup_s: float,
        sample_s: float,
    ) -> None:
        self.region = Region()
        self.region.add(*machines(machine_count))
        self.entitlements: dict[str, Entitlement] = {
            e.name: e for e in entitlements(machine_count, guaranteed)
        }
        self.region.entitle(*self.entitlements.values())
        self.queues = AdmissionQueues(self.entitlements.values(), NON_PREEMPTIBLE_PRIORITY)
        self.capacity_gpus = machine_count * GPUS_PER_MACHINE
        self.deadline_aware = deadline_aware
        self.warmup_s, self.sample_s = warmup_s, sample_s
        self.targets = {team.replace("/", "-"): share for team, share in targets().items()}
        self.teams = [team.replace("/", "-") for team in team_names()]
        self.now_s = 0.0
        self.jobs: dict[str, SimJob] = {}
        self.waiting_placement: set[str] = set()
        """Admitted jobs whose tasks the allocator could not place yet."""
        self.queued: dict[str, str] = {}
        """Handle -> entitlement of every job waiting in a queue."""
        self._queued_per_team: Counter[str] = Counter()
        self.busy_tasks = 0
        self._released = False
        """Tasks left machines since the waiting jobs were last tried."""
        self._gpu = self.queues.tree.dimensions.index("gpus")
        self.tally = Tally()
        self._events: list[tuple[float, int, int, str, int]] = []
        self._sequence = 0
        self._next_sample = warmup_s

    # --- the clock -------------------------------------------------------------------------

    def run(self, arrivals: list[Arrival], horizon_s: float) -> None:
        for number, arrival in enumerate(arrivals):
            self._at(arrival.at_s, ARRIVE, str(number), 0)
        while self._events and self._events[0][0] <= horizon_s:
            at = self._events[0][0]
            self._measure(at)
            self.now_s = at
            while self._events and self._events[0][0] == at:
                _, kind, _, subject, epoch = heapq.heappop(self._events)
                if kind == ARRIVE:
                    self._arrive(arrivals[int(subject)])
                elif kind == FINISH:
                    self._finish(subject, epoch)
                else:
                    self._stop(subject, epoch)
            self._decide()
        self._measure(horizon_s)

    def _at(self, at_s: float, kind: int, subject: str, epoch: int) -> None:
        self._sequence += 1
        heapq.heappush(self._events, (at_s, kind, self._sequence, subject, epoch))

    # --- events ----------------------------------------------------------------------------

    def _arrive(self, arrival: Arrival) -> None:
        self.jobs[arrival.job.handle] = SimJob(arrival, arrival.duration_s)
        self._set_queued(arrival.job.handle, arrival.job.spec.entitlement)
        record = Admission.of(arrival.job.spec, EPOCH + timedelta(seconds=self.now_s))
        if not self.deadline_aware:
            record = record.model_copy(update={"start_deadline": None})
        self.queues.put(QueuedJob(arrival.job.spec.entitlement, record, 1, holding=0))

    def _finish(self, handle: str, epoch: int) -> None:
        job = self.jobs[handle]
        if job.epoch != epoch or job.finished_s is not None:
            return
        job.finished_s = self.now_s
        self._release(job)
        self.queues.remove(handle)

    def _stop(self, handle: str, epoch: int) -> None:
        """A preempted job's grace is over: its tasks stop, and it keeps the work done."""
        job = self.jobs[handle]
        if job.epoch != epoch or job.finished_s is not None:
            return
        if job.running_since is not None:
            job.remaining_s -= self.now_s - job.running_since
            job.running_since = None
        job.epoch += 1
        job.stopping = False
        self._release(job)
        queued = self.queues.jobs[handle]
        self.queues.put(QueuedJob(queued.entitlement, queued.admission, 1, holding=0))

    # --- the decider's pass and the allocator ----------------------------------------------

    def _decide(self) -> None:
        now = EPOCH + timedelta(seconds=self.now_s)
        started = time.perf_counter()
        checks = len(self.tally.check_ms)
        outcome = self.queues.decide(now)
        decisions: list[Decision] = list(outcome.decisions)
        for proposal in outcome.proposals:
            decisions += self._preempt(proposal, now)
        # The decider's own work; the allocator's checks are timed apart.
        checking = sum(self.tally.check_ms[checks:])
        self.tally.decide_ms.append((time.perf_counter() - started) * 1000 - checking)
        if self.queues.tree.over_quota():
            self.tally.over_quota += 1
        fresh = {d.admission.job for d in decisions if self._follow(d.admission)}
        # Space only grows when tasks leave: until then only the newly admitted are tried.
        trying = self.waiting_placement if self._released else fresh
        self._released = False
        for handle in sorted(trying, key=self._placement_order):
            self._place(self.jobs[handle])

    def _preempt(self, proposal: Proposal, now: datetime) -> list[Decision]:
        """What the decider does with a proposal, the allocator's choice of victims run in
        process on the simulated region's index."""
        standing = self.queues.standing(proposal)
        if standing is None:
            return []
        head = self.jobs[standing.head].arrival.job
        offered = [PreemptionCandidate(*stopping) for stopping in self.queues.stopping(standing)]
        started = time.perf_counter()
        choice = choose_preemption(
            self.region.index,
            self.region.cache,
            head,
            self.entitlements[head.spec.entitlement],
            standing.placing,
            offered,
            standing.budget,
        )
        self.tally.check_ms.append((time.perf_counter() - started) * 1000)
        chosen = choice.chosen if choice.fits else None
        decisions, refusal = self.queues.answer(standing, chosen, choice.reason, now)
        if refusal is not None:
            self.tally.refused[refusal.rule] += 1
        return decisions

    def _placement_order(self, handle: str) -> tuple[int, float, float, str]:
        return self.queues.jobs[handle].admission.order()

    def _follow(self, record: Admission) -> bool:
        """What the scheduler does with a decision: places admitted tasks, stops preempted ones
        at the end of their grace. Returns whether the job now waits for placement."""
        job = self.jobs[record.job]
        queued = record.state is AdmissionState.QUEUED
        self._set_queued(job.handle, job.arrival.job.spec.entitlement if queued else None)
        if record.state is AdmissionState.ADMITTED and record.admitted > len(job.rows):
            if job.admitted_s is None:
                job.admitted_s = self.now_s
            self.waiting_placement.add(job.handle)
            return True
        elif record.state is AdmissionState.PREEMPTING and not job.stopping:
            event = record.history[-1]
            if event.kind is AdmissionEventKind.PREEMPTED:
                self.tally.preempted_jobs += 1
                self.tally.preempted_tasks += event.tasks
                if event.cause is not None:
                    self.tally.preempted_by_cause[event.cause.value] += 1
            job.stopping = True
            self.waiting_placement.discard(job.handle)
            entitlement = self.entitlements[job.arrival.job.spec.entitlement]
            self._at(self.now_s + entitlement.preemption.grace_s, STOP, job.handle, job.epoch)
        return False

    def _place(self, job: SimJob) -> None:
        """Places all the job's admitted tasks at once (gang), as the allocator's Place does."""
        spec = job.arrival.job.spec
        entitlement = self.entitlements[spec.entitlement]
        admitted = self.queues.jobs[job.handle].admission.admitted
        choice = self.region.choose(job.arrival.job, entitlement, list(range(admitted)))
        if choice.unplaced:
            return
        self.region.commit(job.arrival.job, entitlement, choice)
        job.rows = dict(choice.placements)
        self.busy_tasks += len(job.rows)
        job.running_since = self.now_s
        self.waiting_placement.discard(job.handle)
        self._at(self.now_s + job.remaining_s, FINISH, job.handle, job.epoch)

    def _release(self, job: SimJob) -> None:
        """Takes the job's tasks off their machines as the allocator's release does; a machine
        left empty goes back to the free pool at once."""
        index = self.region.index
        by_row: defaultdict[int, list[int]] = defaultdict(list)
        for task, row in job.rows.items():
            by_row[row].append(task)
        self.region.revision += 1
        for row, tasks in by_row.items():
            emptied = int(index.task_count[row]) == len(tasks)
            header = FREE if emptied else index.header(row)
            index.remove(row, job.handle, tasks, header, self.region.revision)
        self.busy_tasks -= len(job.rows)
        self._released = self._released or bool(job.rows)
        job.rows = {}

    # --- measuring -------------------------------------------------------------------------

    def _measure(self, until_s: float) -> None:
        """Integrates the shares from the last event to `until_s` (the state did not change)."""
        start = max(self.now_s, self.warmup_s)
        span = until_s - start
        if span <= 0:
            return
        self.tally.measured_s += span
        self.tally.busy_gpu_s += self.busy_tasks * span
        shares = {team: self._held_gpus(team) / self.capacity_gpus for team in self.teams}
        while self._next_sample <= until_s:
            self.tally.trace.append((self._next_sample, shares))
            self._next_sample += self.sample_s
        if not self._saturated():
            return
        normalised = [shares[team] / self.targets[team] for team in self.teams]
        jain = sum(normalised) ** 2 / (len(normalised) * sum(x * x for x in normalised))
        self.tally.saturated_s += span
        self.tally.jain_s += jain * span
        for team in self.teams:
            self.tally.share_s[team] += shares[team] * span

    def _held_gpus(self, team: str) -> int:
        """GPUs the team holds or may claim now, as its quota counts them."""
        return self.queues.tree.nodes[team].consumption[self._gpu]

    def _saturated(self) -> bool:
        """Every team has a job waiting to start: each wants more than it has."""
        return len(self._queued_per_team) == len(self.teams)

    def _set_queued(self, handle: str, team: str | None) -> None:
        """Notes that the job waits in `team`'s queue (None: it does not wait)."""
        before = self.queued.pop(handle, None)
        if before is not None:
            self._queued_per_team[before] -= 1
            if not self._queued_per_team[before]:
                del self._queued_per_team[before]
        if team is not None:
            self.queued[handle] = team
            self._queued_per_team[team] += 1
