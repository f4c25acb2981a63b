"""Settings of an allocator replica, read from TETHER_ALLOCATOR_* environment variables."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.config import TlsSettings
from tether.model import Name


class AllocatorSettings(BaseSettings):
    """Where a replica listens, how it registers, and how hard it retries a conflicting commit."""

    model_config = SettingsConfigDict(env_prefix="TETHER_ALLOCATOR_", extra="ignore")

    tls: TlsSettings = Field(
        default_factory=TlsSettings, description="TLS of its servers and clients: TETHER_TLS_*."
    )

    host: str = Field(default="127.0.0.1", description="Address the gRPC server binds to.")
    port: int = Field(default=0, ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    id: Name = Field(
        default_factory=lambda: f"allocator-{os.getpid()}",
        description="Replica id, the key under allocators/.",
    )
    lease_ttl_s: int = Field(
        default=15,
        ge=1,
        description="TTL of the lease the registration lives on: a dead replica is listed "
        "that long (a scheduler whose call it refuses asks another replica at once).",
    )
    max_attempts: int = Field(
        default=10,
        ge=1,
        description="Conflicts one Place (or transactions one Release) may meet before it "
        "gives up.",
    )
    idle_return_s: float = Field(
        default=300.0,
        ge=0,
        description="How long a machine of an entitlement may hold no task before it goes "
        "back to the free pool.",
    )
    idle_check_s: float = Field(
        default=5.0, gt=0, description="How often idle machines are looked for."
    )
    sync: Literal["watch", "parsync"] = Field(
        default="watch",
        description="How the index follows allocations/: `watch` (every change as it is "
        "committed) or `parsync` (one partition of machines re-read at a time, round robin, "
        "every sync_period_s / sync_partitions; a commit's compares still guard every machine).",
    )
    sync_period_s: float = Field(
        default=2.0,
        gt=0,
        description="With sync=parsync, how long a whole round of partitions takes.",
    )
    sync_partitions: int = Field(
        default=4,
        ge=1,
        description="With sync=parsync, how many partitions (contiguous ranges of machine ids); "
        "1 is a one-shot sync of everything every sync_period_s.",
    )
