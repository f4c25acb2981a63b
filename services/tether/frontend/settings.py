"""The frontend's settings, read from TETHER_FRONTEND_* environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.config import TlsSettings


class FrontendSettings(BaseSettings):
    """Where the REST API listens and how it treats requests, agents and allocators."""

    model_config = SettingsConfigDict(env_prefix="TETHER_FRONTEND_", extra="ignore")

    tls: TlsSettings = Field(
        default_factory=TlsSettings, description="TLS of its servers and clients: TETHER_TLS_*."
    )

    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: int = Field(default=8080, ge=0, le=65535, description="Port to listen on; 0 picks one.")
    max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="Largest request body accepted (job specs)."
    )
    store_wait_s: float = Field(
        default=3.0,
        gt=0,
        description="How long a request waits for a store that cannot be reached before it is "
        "answered 503 (the store's own deadline, TETHER_STORE_TIMEOUT_S, if that is shorter).",
    )
    shard_counts_wait_s: float = Field(
        default=5.0,
        gt=0,
        description="How long a request that needs the shards' loads (GET /admin/shards, a new "
        "entitlement's shard) waits for the frontend's first listing of what they hold before "
        "it is answered 503; also the longest a shard move waits to see itself in the counts, "
        "and a queue request (GET /v1/queues/{entitlement}) waits for the first listing of the "
        "admission records.",
    )
    read_wait_s: float = Field(
        default=1.0,
        gt=0,
        description="How long a GET waits for the frontend's cache to bring in this frontend's "
        "own last write under what it reads before it reads the store instead (a GET whose "
        "min_revision the cache has not reached reads the store at once).",
    )
    cache_idle_s: float = Field(
        default=60.0,
        gt=0,
        description="How long the cache keeps following an entitlement's tasks after the last "
        "GET that read them.",
    )
    agent_timeout_s: float = Field(
        default=5.0, gt=0, description="Deadline of one request to an agent (task logs)."
    )
    allocator_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Deadline of one call to an allocator replica (placement explanations).",
    )
    events_kept: int = Field(
        default=20_000,
        ge=100,
        description="How many of the latest events the event stream keeps, for followers that "
        "reconnect (GET /v1/events with Last-Event-ID); one that missed older ones gets the "
        "current state instead.",
    )
    events_idle_s: float = Field(
        default=300.0,
        ge=0,
        description="How long the event feed keeps following the store after its last "
        "follower left (a follower that comes back within it resumes from the kept events).",
    )
    events_keepalive_s: float = Field(
        default=15.0,
        gt=0,
        description="How often an event stream with nothing to tell sends a comment, so that "
        "proxies and clients know it lives.",
    )
