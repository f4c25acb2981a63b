"""Spread violations: jobs whose tasks sit in fewer fault domains than their spread asks (more
than `max_skew` apart between the fullest domain and the emptiest)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import ClassVar

from tether.model import FaultDomain, Job
from tether.model.rebalance import StrategyName
from tether.rebalancer.strategies.base import CANDIDATES, Candidate
from tether.rebalancer.view import RegionView


class SpreadViolations:
    name: ClassVar[StrategyName] = "spread"
    unit: ClassVar[str] = "tasks over the skew"

    def __init__(self, view: RegionView) -> None:
        # The domains a job may use: those of every level with a machine up.
        self._domains: dict[FaultDomain, set[str]] = {level: set() for level in FaultDomain}
        for machine in view.machines:
            if view.is_up(machine):
                for level in FaultDomain:
                    self._domains[level].add(view.domain(machine, level))

    def excess(self, view: RegionView, job: str) -> int:
        """By how many tasks the job's fullest domain is beyond `max_skew` of its emptiest."""
        spec = view.jobs.get(job)
        counts = self._counts(view, job)
        if spec is None or not counts:
            return 0
        spread = spec.spec.placement.spread
        domains = self._eligible(spec, spread.level)
        emptiest = min((counts.get(domain, 0) for domain in domains), default=0)
        return max(0, max(counts.values()) - emptiest - spread.max_skew)

    def measure(self, view: RegionView) -> float:
        return float(sum(self.excess(view, job) for job in view.by_job))

    def part(self, view: RegionView, machines: Collection[str], jobs: Collection[str]) -> float:
        return float(sum(self.excess(view, job) for job in jobs))

    def candidates(self, view: RegionView) -> list[Candidate]:
        found: list[Candidate] = []
        for job in sorted(view.by_job, key=lambda job: -self.excess(view, job)):
            excess = self.excess(view, job)
            if excess == 0 or len(found) >= CANDIDATES:
                break
            if not view.movable(job):
                continue
            level = view.jobs[job].spec.placement.spread.level
            counts = self._counts(view, job)
            fullest = max(counts, key=lambda domain: (counts[domain], domain))
            # As many tasks of the fullest domain as it is over, those on its busiest machines
            # first, each a group of its own: the planner keeps each only while it still gains.
            tasks = sorted(
                (t for t in view.tasks_of(job) if view.domain(t.machine, level) == fullest),
                key=lambda t: (-view.used_share(t.machine), t.id),
            )
            why = f"{job}: {counts[fullest]} tasks in {level} {fullest}, {excess} over its skew"
            found += [Candidate((task,), why) for task in tasks[:excess]]
        return found[:CANDIDATES]

    def _counts(self, view: RegionView, job: str) -> Counter[str]:
        spec = view.jobs.get(job)
        if spec is None:
            return Counter()
        level = spec.spec.placement.spread.level
        return Counter(view.domain(task.machine, level) for task in view.tasks_of(job))

    def _eligible(self, job: Job, level: FaultDomain) -> set[str]:
        datacenters = job.spec.placement.datacenters
        domains = self._domains[level]
        if not datacenters:
            return domains
        return {domain for domain in domains if domain.split("/", 1)[0] in datacenters}
