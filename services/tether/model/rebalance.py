"""Rebalancer runs: a round the rebalancer was asked for (or made on its own), and its moves."""

from __future__ import annotations

import enum
from typing import Final, Literal, get_args

from pydantic import Field

from tether.model.base import (
    Identifier,
    JobHandle,
    Name,
    NonEmptyStr,
    Quantity,
    TetherModel,
    Timestamp,
)

StrategyName = Literal["left-behind", "spread", "idle", "stranded", "hot-msbs"]
"""The rebalancer's strategies, in the order it chooses moves (its registry's, checked by a
test): what a run may name."""

STRATEGY_NAMES: Final[tuple[StrategyName, ...]] = get_args(StrategyName)


class RunState(enum.StrEnum):
    """pending (asked for, not planned yet) -> done, or failed (with a message)."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class RebalanceMove(TetherModel):
    """A task the round moves (or, in a dry run, would), where to, and for which strategy."""

    job: JobHandle
    index: Quantity
    source: Name
    target: Name
    strategy: StrategyName
    why: str
    operation: Identifier | None = None
    """The MOVE operation proposed for it (None in a dry run)."""


class RebalanceRun(TetherModel):
    """One round of the rebalancer: asked for through the REST API (`tether rebalance plan`,
    `tether rebalance run`) or made by its continuous mode."""

    id: Identifier
    dry_run: bool
    """Plan only: propose no move."""
    strategies: list[StrategyName] = Field(default_factory=list)
    """The strategies to use (in the registry's order of priority, whatever order they are
    named in); empty: the rebalancer's own list (TETHER_REBALANCER_STRATEGIES, all of them by
    default)."""
    requested_by: NonEmptyStr
    """The principal that asked, or `continuous`."""
    state: RunState = RunState.PENDING
    created_at: Timestamp
    updated_at: Timestamp
    moves: list[RebalanceMove] = Field(default_factory=list)
    before: dict[StrategyName, float] = Field(default_factory=dict)
    """Strategy -> its measure of the region as the round read it (lower is better)."""
    after: dict[StrategyName, float] = Field(default_factory=dict)
    """Strategy -> its measure once the moves are done where the allocator suggested."""
    deferred: dict[str, Quantity] = Field(default_factory=dict)
    """Why candidate groups of tasks were not moved -> how many."""
    message: str = ""
    """Why it failed."""
