"""Tasks left behind: on machines that drain or are under maintenance, or whose usable share
shrank below what their tasks hold (a harvest machine), after the moves that notice made."""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar

from tether.model import MachineState
from tether.model.rebalance import StrategyName
from tether.rebalancer.strategies.base import CANDIDATES, Candidate
from tether.rebalancer.view import RegionView

_LEAVING = frozenset({MachineState.DRAINING, MachineState.MAINTENANCE})


class LeftBehind:
    name: ClassVar[StrategyName] = "left-behind"
    unit: ClassVar[str] = "tasks"

    def __init__(self, view: RegionView) -> None:
        pass

    def why(self, view: RegionView, machine: str) -> str | None:
        """Why tasks should not stay on the machine; None if they may."""
        state = view.machines[machine].state
        if state in _LEAVING:
            return f"{machine} is {state}"
        if state is MachineState.UP and not view.fits(machine):
            return f"{machine} holds more than it can use now"
        return None

    def measure(self, view: RegionView) -> float:
        return self.part(view, view.machines, ())

    def part(self, view: RegionView, machines: Collection[str], jobs: Collection[str]) -> float:
        return float(
            sum(
                len(view.by_machine[machine])
                for machine in machines
                if machine in view.by_machine and self.why(view, machine) is not None
            )
        )

    def candidates(self, view: RegionView) -> list[Candidate]:
        found: list[Candidate] = []
        for machine in sorted(view.by_machine):
            why = self.why(view, machine) if view.by_machine[machine] else None
            if why is None:
                continue
            for task in view.tasks_on(machine):
                if view.movable(task.job):
                    found.append(Candidate((task,), why))
                    if len(found) == CANDIDATES:
                        return found
        return found
