"""Rebalancer run requests and views for operators."""

from __future__ import annotations

from pydantic import Field

from tether.frontend.schemas import View
from tether.model import TetherModel, Timestamp
from tether.model.rebalance import RebalanceMove, RebalanceRun, RunState, StrategyName


class RebalanceRequest(TetherModel):
    """The body of POST /admin/rebalance/runs."""

    dry_run: bool = True
    """Plan only (`tether rebalance plan`); false proposes the moves (`tether rebalance run`)."""
    strategies: list[StrategyName] = Field(default_factory=list)
    """The strategies to use, by name; empty: the rebalancer's own list (all, by default)."""


class RebalanceRunView(View):
    id: str
    dry_run: bool
    strategies: list[str]
    requested_by: str
    state: RunState
    created_at: Timestamp
    updated_at: Timestamp
    moves: list[RebalanceMove]
    before: dict[str, float]
    """Strategy -> its measure of the region as the round read it (lower is better)."""
    after: dict[str, float]
    """Strategy -> its measure once the moves are done where the allocator suggested."""
    gains: dict[str, float]
    """Strategy -> how much the moves are expected to lower its measure."""
    deferred: dict[str, int]
    """Why groups of tasks were not moved -> how many."""
    message: str

    @classmethod
    def of(cls, run: RebalanceRun) -> RebalanceRunView:
        gains = {name: run.before[name] - run.after.get(name, 0.0) for name in run.before}
        return cls(**run.model_dump(), gains=gains)


class RebalanceRunList(View):
    runs: list[RebalanceRunView]
    """Newest first."""
