"""Every strategy the rebalancer knows, in the order its moves are chosen: one line each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from tether.model.rebalance import StrategyName
from tether.rebalancer.strategies.base import Strategy
from tether.rebalancer.strategies.hot_msbs import HotMsbs
from tether.rebalancer.strategies.idle_machines import IdleMachines
from tether.rebalancer.strategies.left_behind import LeftBehind
from tether.rebalancer.strategies.spread import SpreadViolations
from tether.rebalancer.strategies.stranded import StrandedCapacity
from tether.rebalancer.view import RegionView

STRATEGIES: Final[dict[StrategyName, Callable[[RegionView], Strategy]]] = {
    LeftBehind.name: LeftBehind,
    SpreadViolations.name: SpreadViolations,
    IdleMachines.name: IdleMachines,
    StrandedCapacity.name: StrandedCapacity,
    HotMsbs.name: HotMsbs,
}
"""Name -> the strategy, made on a round's view. Tasks left behind go first (they risk being
lost), then spread (it protects availability), then the ones that save machines."""
