"""The Gavel simulator's world: the real `RoundScheduler` driven by a simulated clock.

Jobs progress at the profile's throughput for the type they run on."""

from __future__ import annotations

from dataclasses import dataclass, field

from gavel.workload import TraceJob
from tether.model.accelerator import ThroughputProfile
from tether.taskcontrol.appsched.gavel.policies.registry import Policy
from tether.taskcontrol.appsched.gavel.rounds import ROUND_S, RoundScheduler


@dataclass
class Outcome:
    """What one run measured."""

    finished_s: dict[str, float] = field(default_factory=dict)
    jct_s: dict[str, float] = field(default_factory=dict)
    rounds: int = 0
    busy_accelerator_s: float = 0.0
    saturated: bool = False
    """Stopped when the active jobs outgrew `max_active`: the load is more than it sustains."""

    @property
    def makespan_s(self) -> float:
        return max(self.finished_s.values(), default=0.0)

    def average_jct_s(self, names: list[str] | None = None) -> float:
        chosen = [self.jct_s[name] for name in names or self.jct_s if name in self.jct_s]
        return sum(chosen) / len(chosen) if chosen else 0.0


def simulate(
    jobs: list[TraceJob],
    profile: ThroughputProfile,
    policy: Policy,
    counts: dict[str, int],
    *,
    round_s: float = ROUND_S,
    reallocate_every_s: float = 0.0,
    until_finished: set[str] | None = None,
    max_active: int | None = None,
) -> Outcome:
    """Runs `jobs` to completion (or until every job of `until_finished` has finished, or until
    more than `max_active` jobs are active at once).

    Jobs join at the first round that starts at or after their arrival. Each round runs its
    chosen jobs for `round_s` at their throughput on the type they were given; one that finishes
    early leaves its accelerators idle until the round ends, and a round whose jobs all finish
    early ends with the last of them.
    """
    scheduler = RoundScheduler(policy, counts, reallocate_every_s=reallocate_every_s)
    arrivals = sorted(jobs, key=lambda job: (job.arrival_s, job.name))
    by_name = {job.name: job for job in jobs}
    outcome = Outcome()
    now, next_arrival = 0.0, 0
    while next_arrival < len(arrivals) or scheduler.jobs:
        if until_finished is not None and until_finished <= outcome.finished_s.keys():
            break
        if not scheduler.jobs:
            now = max(now, arrivals[next_arrival].arrival_s)
        while next_arrival < len(arrivals) and arrivals[next_arrival].arrival_s <= now:
            job = arrivals[next_arrival]
            scheduler.add(job.accelerator_job(profile), job.total_steps, now)
            next_arrival += 1
        if max_active is not None and len(scheduler.jobs) > max_active:
            outcome.saturated = True
            break
        chosen = scheduler.plan(now)
        ran: dict[str, tuple[str, float]] = {}
        for name, kind in chosen.items():
            active = scheduler.jobs[name]
            rate = active.job.throughputs[kind]
            ran[name] = (kind, min(round_s, (active.total_steps - active.steps_done) / rate))
        # A round whose jobs all finish early ends with the last of them.
        length = max((seconds for _, seconds in ran.values()), default=round_s)
        scheduler.record(chosen, length)
        for name, (kind, seconds) in ran.items():
            active = scheduler.jobs[name]
            steps = active.steps_done + active.job.throughputs[kind] * seconds
            outcome.busy_accelerator_s += seconds * active.job.scale_factor
            if seconds < round_s or steps >= active.total_steps:
                scheduler.remove(name)
                outcome.finished_s[name] = now + seconds
                outcome.jct_s[name] = now + seconds - by_name[name].arrival_s
            else:
                scheduler.report(name, steps, kind, seconds)
        now += length
        outcome.rounds += 1
    return outcome
