"""What a strategy is: a measure of one way placement can be bad, and the moves it proposes to
make it better."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from tether.model.rebalance import StrategyName
from tether.rebalancer.view import PlacedTask, RegionView

CANDIDATES: int = 64
"""Groups a strategy proposes in one round at most, best first: the allocator is asked about
each, and a round should take a moment, not minutes."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """Tasks to move together (all of a machine's, to empty it; or one), and why."""

    tasks: tuple[PlacedTask, ...]
    why: str


class Strategy(Protocol):
    """Made once a round, on the round's view."""

    name: ClassVar[StrategyName]
    unit: ClassVar[str]
    """What `measure` counts, for people: "machines", "tasks", ..."""

    def measure(self, view: RegionView) -> float:
        """How bad the whole region is by this strategy (0: nothing to do; lower is better)."""
        ...

    def part(self, view: RegionView, machines: Collection[str], jobs: Collection[str]) -> float:
        """The share of `measure` that the given machines and jobs make: a move among them
        changes `measure` by as much as it changes this."""
        ...

    def candidates(self, view: RegionView) -> list[Candidate]:
        """At most CANDIDATES groups, best first, of tasks whose jobs may move now."""
        ...


def by_job(candidates: Sequence[Candidate]) -> dict[str, list[int]]:
    """Job -> the task indexes of the candidates, each once, in order: what one Suggest of the
    job asks about."""
    found: dict[str, list[int]] = {}
    for candidate in candidates:
        for task in candidate.tasks:
            indexes = found.setdefault(task.job, [])
            if task.index not in indexes:
                indexes.append(task.index)
    return found


def emptying(view: RegionView, machine: str, why: str) -> Candidate | None:
    """All the machine's tasks, to empty it; None if it holds none or one of their jobs may
    not move now."""
    tasks = view.tasks_on(machine)
    if not tasks or not all(view.movable(task.job) for task in tasks):
        return None
    return Candidate(tuple(tasks), why)
