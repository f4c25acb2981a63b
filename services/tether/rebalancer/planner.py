"""One round's moves, decided on the view alone (no I/O): each candidate group is tried on the
machines the allocator suggested, and kept if its strategy gains and no strategy before it (in
the registry's order of priority) loses, within the limits on moves."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tether.model.rebalance import StrategyName
from tether.rebalancer.strategies.base import Candidate, Strategy
from tether.rebalancer.view import Move, RegionView

EPSILON = 1e-9
"""Gains below this are rounding, not gains."""

Suggestions = Mapping[StrategyName, Mapping[str, str]]
"""Strategy -> task id -> the machine the allocator would put the task on now, asked for each
strategy's candidate tasks of a job together (a task it would put nowhere is missing)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How many moves a round may propose."""

    per_job: int = 1
    """Moves of one job in a round; a job with a move still open is not moved again until it
    is done, so this is also how many of its tasks are ever moving at once."""
    per_minute: int = 10
    """Moves proposed in any minute, the region over."""


@dataclass(frozen=True, slots=True)
class PlannedMove:
    """A task to move, where, and for which strategy."""

    job: str
    index: int
    attempt: int
    source: str
    target: str
    strategy: StrategyName
    why: str


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """The moves of a round, and the measures they are expected to change."""

    moves: list[PlannedMove] = field(default_factory=list)
    before: dict[StrategyName, float] = field(default_factory=dict)
    """Strategy -> its measure of the region as read."""
    after: dict[StrategyName, float] = field(default_factory=dict)
    """Strategy -> its measure once the moves are done (on the machines suggested)."""
    deferred: dict[str, int] = field(default_factory=dict)
    """Why groups were not taken -> how many."""

    @property
    def gains(self) -> dict[StrategyName, float]:
        """Strategy -> how much its measure is expected to drop."""
        return {name: self.before[name] - self.after[name] for name in self.before}


def plan_round(
    view: RegionView,
    strategies: Sequence[Strategy],
    candidates: Sequence[tuple[Strategy, Candidate]],
    suggestions: Suggestions,
    limits: Limits,
    *,
    proposed_lately: int = 0,
) -> RoundPlan:
    """Chooses the round's moves among `candidates` (in order) and applies them to `view`.

    `strategies` in order of priority: a move for one may cost the later ones (spreading a job
    puts a task on an emptier machine, which the consolidating strategies count against), never
    an earlier one.

    `proposed_lately`: moves proposed within the last minute, which count against
    `limits.per_minute`.
    """
    before = {strategy.name: strategy.measure(view) for strategy in strategies}
    moves: list[PlannedMove] = []
    deferred: Counter[str] = Counter()
    per_job: Counter[str] = Counter()
    left = limits.per_minute - proposed_lately
    moved: set[str] = set()
    emptied: set[str] = set()
    receiving: set[str] = set()
    for strategy, candidate in candidates:
        tasks = candidate.tasks
        suggested = suggestions.get(strategy.name, {})
        targets = [suggested.get(task.id) for task in tasks]
        sources = {task.machine for task in tasks}
        reason = None
        if any(task.id in moved for task in tasks) or sources & receiving:
            reason = "moved-this-round"
        elif any(
            target is None or target == task.machine
            for task, target in zip(tasks, targets, strict=True)
        ):
            reason = "no-better-machine"
        elif any(target in emptied for target in targets):
            reason = "moved-this-round"
        elif len(tasks) > left:
            reason = "limit-per-minute"
        elif any(
            per_job[job] + n > limits.per_job for job, n in Counter(t.job for t in tasks).items()
        ):
            reason = "limit-per-job"
        if reason is not None:
            deferred[reason] += 1
            continue
        tried = [Move(task, target) for task, target in zip(tasks, targets, strict=True) if target]
        reason = _try(view, strategy, strategies, tried)
        if reason is not None:
            deferred[reason] += 1
            continue
        for move in tried:
            task = move.task
            moves.append(
                PlannedMove(
                    task.job,
                    task.index,
                    task.attempt,
                    task.machine,
                    move.target,
                    strategy.name,
                    candidate.why,
                )
            )
            moved.add(task.id)
            per_job[task.job] += 1
            receiving.add(move.target)
        emptied |= sources
        left -= len(tried)
    after = {strategy.name: strategy.measure(view) for strategy in strategies}
    return RoundPlan(moves, before, after, dict(deferred))


def _try(
    view: RegionView, strategy: Strategy, strategies: Sequence[Strategy], moves: list[Move]
) -> str | None:
    """Applies the moves to the view if every target is up and still fits, the strategy gains
    and no strategy before it loses; else leaves the view as it was and says why not."""
    machines = {move.task.machine for move in moves} | {move.target for move in moves}
    jobs = {move.task.job for move in moves}
    weighed = [*strategies[: strategies.index(strategy)], strategy]
    parts = {s.name: s.part(view, machines, jobs) for s in weighed}
    if any(move.target not in view.machines for move in moves):
        return "does-not-fit"  # a machine the allocator knows and the round did not read
    applied = view.apply(moves)
    if not all(view.is_up(move.target) and view.fits(move.target) for move in moves):
        view.undo(applied)
        return "does-not-fit"
    for other in weighed:
        change = parts[other.name] - other.part(view, machines, jobs)
        if other is strategy and change <= EPSILON:
            view.undo(applied)
            return "no-gain"
        if other is not strategy and change < -EPSILON:
            view.undo(applied)
            return f"worsens-{other.name}"
    return None
