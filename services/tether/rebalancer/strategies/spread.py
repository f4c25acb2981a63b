"""Spread violations: jobs whose tasks sit in fewer fault domains than their spread asks: the
tasks of each domain beyond `max_skew` more than the job's emptiest domain has."""

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

    def over(self, view: RegionView, job: str) -> dict[str, int]:
        """Domain -> how many of the job's tasks there are beyond `max_skew` more than its
        emptiest domain has (only the domains over). Each is a task to move: counting every
        domain's, not only the fullest's, a move out of one of two domains as full as each other
        gains as much as the move out of the other."""
        spec = view.jobs.get(job)
        counts = self._counts(view, job)
        if spec is None or not counts:
            return {}
        spread = spec.spec.placement.spread
        domains = self._eligible(spec, spread.level)
        cap = min((counts.get(domain, 0) for domain in domains), default=0) + spread.max_skew
        return {domain: count - cap for domain, count in counts.items() if count > cap}

    def excess(self, view: RegionView, job: str) -> int:
        return sum(self.over(view, job).values())

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
            over = self.over(view, job)
            # From each domain over, as many tasks as it is over, those on its busiest machines
            # first, each a group of its own: the planner keeps each only while it still gains.
            for domain in sorted(over, key=lambda d: (-counts[d], d)):
                tasks = sorted(
                    (t for t in view.tasks_of(job) if view.domain(t.machine, level) == domain),
                    key=lambda t: (-view.used_share(t.machine), t.id),
                )
                why = f"{job}: {counts[domain]} tasks in {level} {domain}, {excess} over its skew"
                found += [Candidate((task,), why) for task in tasks[: over[domain]]]
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
