"""Stranded capacity: free room scattered over machines that also run tasks, where only tasks
smaller than what is left fit; emptying the least used of them makes whole machines of it."""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from tether.model.rebalance import StrategyName
from tether.rebalancer.strategies.base import CANDIDATES, Candidate, emptying
from tether.rebalancer.view import RegionView

EMPTY_BELOW: float = 0.5
"""Machines whose tasks use less than this share of them are the ones worth emptying."""


class StrandedCapacity:
    name: ClassVar[StrategyName] = "stranded"
    unit: ClassVar[str] = "machines of free room on busy machines"

    def __init__(self, view: RegionView) -> None:
        pass

    def measure(self, view: RegionView) -> float:
        return self.part(view, view.machines, ())

    def part(self, view: RegionView, machines: Collection[str], jobs: Collection[str]) -> float:
        return sum(
            view.free_share(machine)
            for machine in machines
            if view.by_machine.get(machine) and view.is_up(machine)
        )

    def candidates(self, view: RegionView) -> list[Candidate]:
        light = sorted(
            (view.used_share(machine), machine)
            for machine, tasks in view.by_machine.items()
            if tasks and view.is_up(machine) and view.used_share(machine) < EMPTY_BELOW
        )
        found: list[Candidate] = []
        for share, machine in light:
            candidate = emptying(view, machine, f"{machine} is {share:.0%} used")
            if candidate is not None:
                found.append(candidate)
                if len(found) == CANDIDATES:
                    break
        return found
