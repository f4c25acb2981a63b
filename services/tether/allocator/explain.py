"""Explain: every rule's effect on one more task of a job over the whole region, and how the
machines holding its tasks rank."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tether.allocator.index import tasks_by_row
from tether.allocator.placement import Planner
from tether.allocator.rules.checks import RuleOutcome, apply_checks, rejections
from tether.allocator.rules.pipeline import best_first


@dataclass(frozen=True, slots=True)
class Ranked:
    """A machine holding tasks of the job, and how it ranks for one more task."""

    machine: str
    tasks: list[int]
    rank: int
    preferences: list[str]


@dataclass(frozen=True, slots=True)
class PreferenceCount:
    rule: str
    weight: int
    matching: int


@dataclass(frozen=True, slots=True)
class Explanation:
    """Explain's answer: every hard rule's effect for one more task, and the ranking."""

    considered: int
    fitting: int
    entitlement_machines: int
    outcomes: list[RuleOutcome]
    preferences: list[PreferenceCount]
    chosen: list[Ranked]
    summary: str


def explain(planner: Planner) -> Explanation:
    """Applies every rule for one more task of the job over the whole region and ranks the
    machines that pass, as `choose` would order them (the spread aside)."""
    index, job, rules = planner.index, planner.job, planner.rules
    filtered = apply_checks(index.live_rows(), planner.all_checks())
    fitting = filtered.survivors
    scores = rules.scores(fitting, pool=False)
    free = index.free[fitting]
    order = best_first(fitting, scores, free, first=(index.owner[fitting] != planner.owner,))
    rank_of = {int(row): rank + 1 for rank, row in enumerate(fitting[order].tolist())}
    parts = rules.explained_parts()
    counts = [
        PreferenceCount(label, weight, int(((scores >> bit) & 1).sum()))
        for label, weight, bit in parts
    ]
    by_row = tasks_by_row(dict(sorted(index.held(job.handle).items())))
    chosen = []
    for row, tasks in sorted(by_row.items(), key=lambda item: index.ids[item[0]]):
        score = int(rules.scores(np.array([row], np.intp), pool=False)[0])
        satisfied = [label for label, _, bit in parts if score >> bit & 1]
        chosen.append(Ranked(index.ids[row], tasks, rank_of.get(row, 0), satisfied))
    rejected = rejections(filtered.outcomes, filtered.considered, details=False)
    if len(fitting):
        summary = f"{len(fitting)} of {filtered.considered} machines fit"
        summary += f"; {rejected}" if rejected else ""
    else:
        summary = rejected
    return Explanation(
        filtered.considered,
        len(fitting),
        len(index.owned_rows(planner.owner)),
        filtered.outcomes,
        counts,
        chosen,
        summary,
    )
