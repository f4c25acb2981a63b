"""Scheduler settings, read from TETHER_SCHEDULER_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.config import TlsSettings


class SchedulerSettings(BaseSettings):
    """How a scheduler replica elects its shard's leader and how often the leader reconciles."""

    model_config = SettingsConfigDict(env_prefix="TETHER_SCHEDULER_", extra="ignore")

    tls: TlsSettings = Field(
        default_factory=TlsSettings, description="TLS of its servers and clients: TETHER_TLS_*."
    )

    lease_ttl_s: int = Field(
        default=15,
        ge=1,
        description="TTL of the leader's lease: a leader that hangs, or whose host dies, is "
        "replaced within it (one whose process ends, at once: see liveness_host).",
    )
    liveness_host: str = Field(
        default="127.0.0.1",
        description="Address of the replica's liveness socket, which its standbys connect to "
        "so as to take over the moment its process ends.",
    )
    status_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="How often the leader reports its work (GET /admin/shards shows it).",
    )
    region_poll_s: float = Field(
        default=2.0,
        gt=0,
        description="How often a replica whose shard is not in the region config yet looks "
        "again (an admin adds shards with POST /admin/shards).",
    )
    resync_s: float = Field(
        default=5.0,
        gt=0,
        description="Pause between two sweeps that reconcile every job of the shard (a safety "
        "net for missed changes).",
    )
    resync_tasks_per_s: float = Field(
        default=2000.0,
        gt=0,
        description="How fast a sweep goes, in tasks a second: a sweep of a shard of 100,000 "
        "tasks takes 50 s, so that the net costs a leader a bounded share of its CPU.",
    )
    place_retry_s: float = Field(
        default=2.0, gt=0, description="Tasks the allocator could not place are retried after it."
    )
    allocator_timeout_s: float = Field(
        default=10.0, gt=0, description="Deadline of one Place or Release call to an allocator."
    )
    concurrency: int = Field(
        default=8, ge=1, description="How many jobs the leader reconciles at the same time."
    )
    control_timeout_s: float = Field(
        default=3.0, gt=0, description="Deadline of one TaskController.Process call."
    )
    control_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="How often a job with operations waiting for approval asks again.",
    )
    control_backoff_max_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest pause between calls to a controller that keeps failing (the pause "
        "doubles from control_interval_s).",
    )
