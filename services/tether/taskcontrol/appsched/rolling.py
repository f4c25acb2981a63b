"""`rolling`: at most a fixed number or share of a job's tasks down at once."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tether.taskcontrol.appsched.base import (
    Decision,
    ReferenceController,
    Situation,
    task_indexes,
)

_MAX_UNAVAILABLE = re.compile(r"(\d+)(%?)")


@dataclass(frozen=True, slots=True)
class MaxUnavailable:
    """How many tasks may be down at once: a percentage of the job's tasks, or a count."""

    amount: int
    percent: bool

    @classmethod
    def parse(cls, text: str) -> MaxUnavailable:
        """`10%` or `3`; ValueError says what is wrong."""
        match = _MAX_UNAVAILABLE.fullmatch(text.strip())
        if match is None:
            raise ValueError(
                f"{text!r} is neither a percentage of the job's tasks (like 10%) nor a number "
                "of tasks (like 3)"
            )
        amount, percent = int(match[1]), bool(match[2])
        if percent and not 1 <= amount <= 100:
            raise ValueError(f"{text!r}: a percentage must be from 1% to 100%")
        if amount < 1:
            raise ValueError(f"{text!r}: at least 1 task must be allowed down")
        return cls(amount, percent)

    def budget(self, task_count: int) -> int:
        """Tasks that may be down in a job of `task_count`; a percentage allows at least one,
        so that a small job can still be updated."""
        if not self.percent:
            return self.amount
        return max(1, task_count * self.amount // 100)

    def __str__(self) -> str:
        return f"{self.amount}%" if self.percent else str(self.amount)


def plan_rolling(situation: Situation, limit: MaxUnavailable) -> Decision:
    """Acknowledges pending operations, oldest first, while the tasks down (unhealthy or of an
    acknowledgement in flight) stay within the budget.

    After the first operation that does not fit, no younger one that would take a task down is
    acknowledged either, so that a large operation is not overtaken forever by smaller ones. An
    operation whose tasks are all down already takes nothing from the budget and always goes.
    """
    budget = limit.budget(situation.task_count)
    down = set(situation.down)
    acks: list[str] = []
    first_blocked = ""
    for operation in situation.pending:
        added = task_indexes(operation) - down
        if added and (first_blocked or len(down) + len(added) > budget):
            first_blocked = first_blocked or (
                f"{len(down)} of {situation.task_count} tasks are down or about to be, and "
                f"{operation.id} would take {len(added)} more; at most {budget} may be down "
                f"(--max-unavailable {limit})"
            )
            continue
        down |= added
        acks.append(operation.id)
    return Decision(acks, first_blocked)


class RollingController(ReferenceController):
    """Serves `plan_rolling` with one `--max-unavailable` for every job it controls."""

    def __init__(self, limit: MaxUnavailable) -> None:
        super().__init__()
        self.limit = limit

    async def plan(self, situation: Situation) -> Decision:
        return plan_rolling(situation, self.limit)
