"""Choosing which of a preemption's candidates stop, machine by machine (as the Kubernetes
scheduler picks victims per node): the fewest tasks, of the lowest tiers, that let the
preempting job's tasks be placed, each answer checked by the planner run on the index as it
would be without them (read-only: nothing is placed or released)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from tether.allocator.cache import ChoiceCache
from tether.allocator.index import NONE, UP, AllocationIndex
from tether.allocator.index.columns import I64
from tether.allocator.placement import Planner, Released
from tether.model import Entitlement, Job

REPRIEVE_LIMIT: Final = 16
"""Victims the search tries to spare once the tasks fit, the most valuable first: each try is
a plan, and a machine-by-machine choice rarely leaves more than a few to spare."""


@dataclass(frozen=True, slots=True)
class PreemptionCandidate:
    """Tasks of one job a preemption may stop: every task it holds from index `first` on."""

    job: str
    first: int
    tier: int = 0
    """Lower goes first; within a tier, the choice that stops the fewest tasks."""


@dataclass(frozen=True, slots=True)
class PreemptionChoice:
    """The answer of `choose_preemption`."""

    fits: bool
    chosen: tuple[int, ...]
    """Positions in the candidates of those to stop, ascending (empty when none need stop)."""
    reason: str
    """Why the tasks fit nowhere even with every candidate stopped ("" if they fit)."""


def choose_preemption(
    index: AllocationIndex,
    cache: ChoiceCache,
    job: Job,
    entitlement: Entitlement,
    indexes: Sequence[int],
    candidates: Sequence[PreemptionCandidate],
    budget: int,
) -> PreemptionChoice:
    """Which `candidates` must stop for every task of `indexes` of `job` to find a machine,
    stopping at most `budget` tasks: machine by machine, each time the machine that makes room
    for the most tasks with the fewest stopped of the lowest tier (another entitlement's machine
    helps only once every task on it stops: it goes back to the free pool); then the victims not
    needed after all are spared, the most valuable first. Should the machines' choice fall short,
    the candidates are taken in their order instead."""
    held = index.held(job.handle)
    search = _Search(
        index, cache, job, entitlement, [t for t in indexes if t not in held], held, candidates
    )
    every = range(len(candidates))
    missing, reason = search.unplaced(every)
    if missing:
        return PreemptionChoice(False, (), reason)
    chosen = search.by_machine(budget)
    if chosen is None:
        chosen = search.in_order(budget)
    if chosen is None:
        why = f"no set of the candidates stopping at most {budget} tasks makes room"
        return PreemptionChoice(False, (), why)
    return PreemptionChoice(True, tuple(sorted(search.reprieve(chosen))), "")


class _Search:
    """The candidates' tasks by machine, and plans of the job with some of them stopped."""

    def __init__(
        self,
        index: AllocationIndex,
        cache: ChoiceCache,
        job: Job,
        entitlement: Entitlement,
        wanted: list[int],
        held: Mapping[int, int],
        candidates: Sequence[PreemptionCandidate],
    ) -> None:
        self.index, self.cache, self.job, self.entitlement = index, cache, job, entitlement
        self.wanted, self.held, self.candidates = wanted, held, candidates
        self.owner = index.owners.code(entitlement.name)
        self.stops = [index.held_from({c.job: c.first}) for c in candidates]
        """Per candidate, row -> (resources, tasks) it frees there."""
        self.tasks = [sum(tasks for _, tasks in stop.values()) for stop in self.stops]
        self.on_row: defaultdict[int, list[int]] = defaultdict(list)
        for position, stop in enumerate(self.stops):
            for row in stop:
                self.on_row[row].append(position)

    def unplaced(self, chosen: Iterable[int]) -> tuple[int, str]:
        """How many of the wanted tasks find no machine with the `chosen` stopped, and why."""
        freed: dict[int, tuple[I64, int]] = {}
        for p in self._lowest(chosen):
            for row, (amount, tasks) in self.stops[p].items():
                known = freed.get(row)
                freed[row] = (
                    (amount, tasks) if known is None else (known[0] + amount, known[1] + tasks)
                )
        released = released_by(self.index, self.entitlement, freed)
        planner = Planner(self.index, self.cache, self.job, self.entitlement, released)
        missing = planner.choose(self.wanted, self.held).unplaced
        return len(missing), next(iter(missing.values()), "")

    def by_machine(self, budget: int) -> set[int] | None:
        """Machines cleared one at a time, the best value first, until the tasks fit."""
        chosen: set[int] = set()
        short, _ = self.unplaced(chosen)
        rows = np.fromiter(self.on_row, np.intp, len(self.on_row))
        # Whether each machine takes the job's tasks at all: the rules that do not count room,
        # checked once; room is counted below for each choice of victims.
        planner = Planner(self.index, self.cache, self.job, self.entitlement)
        usable = rows[planner.rules.accepted(rows) & (self.index.state[rows] == UP)].tolist()
        while short:
            spent = self.cost(chosen)
            best: tuple[tuple[float, ...], list[int], int] | None = None
            for row in usable:
                found = self._clearing(planner, row, chosen, short)
                if found is None:
                    continue
                new, gain = found
                cost = self.cost(chosen | set(new)) - spent
                if spent + cost > budget:
                    continue
                tier = max(self.candidates[p].tier for p in new)
                key = (tier, cost / min(gain, short), len(new), max(new))
                if best is None or key < best[0]:
                    best = (key, new, gain)
            if best is None:
                return None
            _, new, gain = best
            chosen.update(new)
            short -= min(gain, short)
            if not short:
                short, _ = self.unplaced(chosen)
        return chosen

    def _clearing(
        self, planner: Planner, row: int, chosen: set[int], short: int
    ) -> tuple[list[int], int] | None:
        """The candidates on `row` not yet chosen that must stop for it to take up to `short`
        more tasks, and how many more it then takes; None if it cannot take more."""
        here = self.on_row[row]
        others = [p for p in here if p not in chosen]
        if not others:
            return None
        stopped = chosen.intersection(here)
        if int(self.index.owner[row]) not in (NONE, self.owner):
            # Another entitlement's machine: it is the job's only once every task on it stops.
            if self._freed(row, here)[1] < int(self.index.task_count[row]):
                return None
            gain = self._room(planner, row, here)
            return (others, gain) if gain > 0 else None
        before = self._room(planner, row, stopped)
        target = min(self._room(planner, row, here), before + short)
        if target <= before:
            return None
        # The cheapest first (the lowest tier, the fewest tasks in all, the most here) until
        # the machine takes as many as it can use; then any that turn out not needed go back.
        order = sorted(others, key=lambda p: (*self._value(p)[:2], -self.stops[p][row][1], p))
        victims: list[int] = []
        for p in order:
            victims.append(p)
            if self._room(planner, row, stopped.union(victims)) >= target:
                break
        for p in victims[-2::-1]:
            if self._room(planner, row, stopped.union(v for v in victims if v != p)) >= target:
                victims.remove(p)
        return sorted(victims), target - before

    def _value(self, position: int) -> tuple[int, int, int]:
        """What stopping the candidate costs, lowest first: its tier, its tasks, its place."""
        return (self.candidates[position].tier, self.tasks[position], position)

    def _lowest(self, positions: Iterable[int]) -> list[int]:
        """Of the candidates of each job, the one stopping from the lowest index: it stops the
        others' tasks too."""
        lowest: dict[str, int] = {}
        for p in positions:
            job = self.candidates[p].job
            if job not in lowest or self.candidates[p].first < self.candidates[lowest[job]].first:
                lowest[job] = p
        return list(lowest.values())

    def cost(self, positions: Iterable[int]) -> int:
        """Tasks the candidates stop together."""
        return sum(self.tasks[p] for p in self._lowest(positions))

    def _freed(self, row: int, positions: Iterable[int]) -> tuple[I64, int]:
        """Resources and tasks the candidates free together on `row`."""
        amount = np.zeros(len(self.index.dimensions), np.int64)
        tasks = 0
        for p in self._lowest(positions):
            stop = self.stops[p].get(row)
            if stop is not None:
                amount[: len(stop[0])] += stop[0]
                tasks += stop[1]
        return amount, tasks

    def _room(self, planner: Planner, row: int, stopped: Iterable[int]) -> int:
        """How many tasks of the job `row` takes with the candidates `stopped`."""
        free = planner.free(row).copy()
        amount, _ = self._freed(row, stopped)
        free[: len(amount)] += amount
        return int(planner.rules.room(np.array([row], np.intp), free[None, :])[0])

    def in_order(self, budget: int) -> set[int] | None:
        """The fewest candidates, taken in their order within `budget`, whose stopping lets the
        tasks fit (fitting only grows as more stop: found by bisection)."""
        taken: list[int] = []
        for position in range(len(self.candidates)):
            if self.cost([*taken, position]) <= budget:
                taken.append(position)
        if not taken or self.unplaced(taken)[0]:
            return None
        low, high = 1, len(taken)  # the fewest that fit lie in [low, high]
        while low < high:
            middle = (low + high) // 2
            if self.unplaced(taken[:middle])[0]:
                low = middle + 1
            else:
                high = middle
        return set(taken[:low])

    def reprieve(self, chosen: set[int]) -> set[int]:
        """`chosen` less the victims the tasks fit without, the most valuable tried first."""
        for position in sorted(chosen, key=self._value, reverse=True)[:REPRIEVE_LIMIT]:
            if not self.unplaced(chosen - {position})[0]:
                chosen = chosen - {position}
        return chosen


def released_by(
    index: AllocationIndex, entitlement: Entitlement, freed: Mapping[int, tuple[I64, int]]
) -> Released:
    """The index with `freed` (row -> resources and tasks) gone, seen by a job of
    `entitlement`."""
    owner = index.owners.code(entitlement.name)
    # A machine holds tasks of its owner's jobs only: the entitlement's own tasks are those on
    # its machines, and what they free comes back to its quota.
    credit = np.zeros(len(index.dimensions), np.int64)
    vacated = set()
    for row, (amount, tasks) in freed.items():
        holder = int(index.owner[row])
        if holder == owner:
            credit[: len(amount)] += amount
        elif holder != NONE and int(index.task_count[row]) == tasks:
            vacated.add(row)
    return Released({row: amount for row, (amount, _) in freed.items()}, frozenset(vacated), credit)
