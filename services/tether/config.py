"""Settings for every Tether process, read from TETHER_* environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_STORE_URL = "sqlite:///.tether/store.db"


class StoreSettings(BaseSettings):
    """Where the region's state lives. `TETHER_STORE` picks the backend by URL scheme."""

    model_config = SettingsConfigDict(env_prefix="TETHER_STORE_", extra="ignore")

    url: str = Field(
        default=DEFAULT_STORE_URL,
        validation_alias=AliasChoices("TETHER_STORE", "TETHER_STORE_URL"),
        description=(
            "sqlite:///path/to/region.db (embedded, the default), postgresql://... , or "
            "etcd://host:port[,host:port...] (etcds:// for TLS)."
        ),
    )
    username: str | None = Field(default=None, description="etcd user (with password).")
    password: SecretStr | None = Field(default=None, description="etcd password.")
    ca_file: Path | None = Field(default=None, description="CA bundle that signed etcd's cert.")
    cert_file: Path | None = Field(default=None, description="Client certificate for etcd mTLS.")
    key_file: Path | None = Field(default=None, description="Client key for etcd mTLS.")
    timeout_s: float = Field(default=10.0, gt=0, description="Deadline of one store request.")
    sql_event_retention: int = Field(
        default=200_000,
        ge=1_000,
        description="The SQL backend keeps at least this many revisions of history for watches.",
    )
    sql_poll_interval_s: float = Field(
        default=0.02,
        gt=0,
        le=1,
        description="How often SQL watches look for other processes' writes.",
    )


class LimitSettings(BaseSettings):
    """Region-wide limits that validation enforces on user input."""

    model_config = SettingsConfigDict(env_prefix="TETHER_LIMITS_", extra="ignore")

    max_tasks_per_job: int = Field(
        default=20_000, ge=1, description="Largest task count a single job may ask for."
    )


@lru_cache(maxsize=1)
def limit_settings() -> LimitSettings:
    """The process-wide limits, read once from the environment."""
    return LimitSettings()
