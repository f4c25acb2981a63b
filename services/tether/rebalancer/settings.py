"""Rebalancer settings, read from TETHER_REBALANCER_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.config import TlsSettings
from tether.model.rebalance import STRATEGY_NAMES, StrategyName


class RebalancerSettings(BaseSettings):
    """How the rebalancer elects its leader, how often it plans, and how much it may move."""

    model_config = SettingsConfigDict(env_prefix="TETHER_REBALANCER_", extra="ignore")

    tls: TlsSettings = Field(
        default_factory=TlsSettings, description="TLS of its servers and clients: TETHER_TLS_*."
    )

    lease_ttl_s: int = Field(
        default=15,
        ge=1,
        description="TTL of the leader's lease: a leader that hangs, or whose host dies, is "
        "replaced within it (one whose process ends, at once).",
    )
    liveness_host: str = Field(
        default="127.0.0.1",
        description="Address of the replica's liveness socket, which its standbys connect to.",
    )
    continuous: bool = Field(
        default=False,
        description="Plan and propose moves every period_s on its own; off: only the rounds "
        "asked for (`tether rebalance run`).",
    )
    period_s: float = Field(default=60.0, gt=0, description="Pause between two continuous rounds.")
    strategies: list[StrategyName] = Field(
        default_factory=lambda: list(STRATEGY_NAMES),
        description="The strategies continuous rounds use, and runs that name none.",
    )
    max_moves_per_job: int = Field(
        default=1,
        ge=1,
        description="Moves of one job a round proposes; a job with a move still open is not "
        "moved again until it is done.",
    )
    max_moves_per_minute: int = Field(
        default=10, ge=1, description="Moves proposed in any minute, the region over."
    )
    move_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="A move still waiting for approval after this is withdrawn: its gain was "
        "reckoned on a region that has moved on.",
    )
    allocator_timeout_s: float = Field(
        default=10.0, gt=0, description="Deadline of one Suggest call to an allocator."
    )
    runs_kept: int = Field(
        default=100, ge=1, description="Runs kept in the store; older ones are deleted."
    )
