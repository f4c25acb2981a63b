"""The resource broker's settings, read from TETHER_BROKER_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.model import Name


class BrokerSettings(BaseSettings):
    """Which datacenter this broker keeps the inventory of."""

    model_config = SettingsConfigDict(env_prefix="TETHER_BROKER_", extra="ignore")

    dc: Name = Field(description="The datacenter whose machines this broker records.")
    lease_ttl_s: int = Field(
        default=15,
        ge=1,
        description="TTL of the lease the broker's registration lives on: a dead broker is "
        "listed that long.",
    )
    harvest_notice_s: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="Notice the tasks a harvest machine's shrink leaves without room get to move "
        "off it (through their TaskController), from the report that shrank it.",
    )
