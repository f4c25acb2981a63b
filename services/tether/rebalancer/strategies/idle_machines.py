"""Machines idle in entitlements: an entitlement's machines that its tasks barely use, held
away from the free pool; emptied, the allocator returns them after its idle delay."""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from tether.model.rebalance import StrategyName
from tether.rebalancer.strategies.base import CANDIDATES, Candidate, emptying
from tether.rebalancer.view import RegionView

IDLE_BELOW: float = 0.25
"""An entitlement's machine whose tasks use less than this share of it is all but idle."""


class IdleMachines:
    name: ClassVar[StrategyName] = "idle"
    unit: ClassVar[str] = "machines all but idle in entitlements"

    def __init__(self, view: RegionView) -> None:
        pass

    def idle(self, view: RegionView, machine: str) -> bool:
        return (
            view.owners.get(machine) is not None
            and bool(view.by_machine.get(machine))
            and view.is_up(machine)
            and view.used_share(machine) < IDLE_BELOW
        )

    def measure(self, view: RegionView) -> float:
        return self.part(view, view.machines, ())

    def part(self, view: RegionView, machines: Collection[str], jobs: Collection[str]) -> float:
        return float(sum(self.idle(view, machine) for machine in machines))

    def candidates(self, view: RegionView) -> list[Candidate]:
        idle = sorted(
            (view.used_share(machine), machine)
            for machine in view.machines
            if self.idle(view, machine)
        )
        found: list[Candidate] = []
        for share, machine in idle:
            entitlement = view.owners[machine]
            why = f"{machine} of {entitlement} is {share:.0%} used"
            candidate = emptying(view, machine, why)
            if candidate is not None:
                found.append(candidate)
                if len(found) == CANDIDATES:
                    break
        return found
