"""The health checker's settings, read from TETHER_HEALTH_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class HealthSettings(BaseSettings):
    """How long a heartbeat may be missing, and how often machines are checked."""

    model_config = SettingsConfigDict(env_prefix="TETHER_HEALTH_", extra="ignore")

    grace_s: float = Field(
        default=5.0,
        gt=0,
        allow_inf_nan=False,
        description="An up machine without a heartbeat for this long is marked down.",
    )
    check_interval_s: float = Field(
        default=0.5,
        gt=0,
        allow_inf_nan=False,
        description="How often machines without a heartbeat are checked against the grace.",
    )
