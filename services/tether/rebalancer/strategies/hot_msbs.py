"""Hot MSBs: main switchboards whose machines run much busier than the region's, where a
power or cooling fault would take more work down; their tasks move to cooler ones."""

from __future__ import annotations

from collections.abc import Collection
from statistics import fmean
from typing import ClassVar

from tether.model import FaultDomain
from tether.model.rebalance import StrategyName
from tether.rebalancer.strategies.base import CANDIDATES, Candidate
from tether.rebalancer.view import RegionView

HOT_MARGIN: float = 0.15
"""An MSB is hot when its machines' mean used share exceeds the region's MSBs' mean by this."""


class HotMsbs:
    name: ClassVar[StrategyName] = "hot-msbs"
    unit: ClassVar[str] = "used share above the region's"

    def __init__(self, view: RegionView) -> None:
        self._machines: dict[str, list[str]] = {}
        for machine in sorted(view.machines):
            if view.is_up(machine):
                msb = view.domain(machine, FaultDomain.MSB)
                self._machines.setdefault(msb, []).append(machine)
        # The bar stays where the round found it: moves shift heat between MSBs, not overall.
        heats = [self.heat(view, msb) for msb in self._machines]
        self._bar = fmean(heats) + HOT_MARGIN if heats else 1.0

    def heat(self, view: RegionView, msb: str) -> float:
        return fmean(view.used_share(machine) for machine in self._machines[msb])

    def measure(self, view: RegionView) -> float:
        return self._excess(view, self._machines)

    def part(self, view: RegionView, machines: Collection[str], jobs: Collection[str]) -> float:
        msbs = {view.domain(m, FaultDomain.MSB) for m in machines}
        return self._excess(view, msbs & self._machines.keys())

    def candidates(self, view: RegionView) -> list[Candidate]:
        found: list[Candidate] = []
        for msb in sorted(self._machines, key=lambda msb: -self.heat(view, msb)):
            heat = self.heat(view, msb)
            if heat <= self._bar:
                break
            # Tasks of its busiest machines first, one group each.
            busiest = sorted(self._machines[msb], key=lambda m: -view.used_share(m))
            for machine in busiest:
                for task in view.tasks_on(machine):
                    if view.movable(task.job):
                        why = f"MSB {msb} is {heat:.0%} used, the region's bar {self._bar:.0%}"
                        found.append(Candidate((task,), why))
                        if len(found) == CANDIDATES:
                            return found
        return found

    def _excess(self, view: RegionView, msbs: Collection[str]) -> float:
        return sum(max(0.0, self.heat(view, msb) - self._bar) for msb in msbs)
