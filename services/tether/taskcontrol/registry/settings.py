"""Settings of the TaskController registry, read from TETHER_REGISTRY_* environment variables."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.config import TlsSettings


class RegistrySettings(BaseSettings):
    """Where the registry listens, and how long registrations live between renewals."""

    model_config = SettingsConfigDict(env_prefix="TETHER_REGISTRY_", extra="ignore")

    tls: TlsSettings = Field(
        default_factory=TlsSettings, description="TLS of its servers and clients: TETHER_TLS_*."
    )

    host: str = Field(default="127.0.0.1", description="Address the gRPC server binds to.")
    port: int = Field(default=0, ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    default_ttl_s: int = Field(
        default=15, ge=1, description="Lifetime of a registration that asks for none."
    )
    max_ttl_s: int = Field(
        default=300,
        ge=1,
        description="Longest lifetime granted: a controller that died is called at most this "
        "long after its last renewal.",
    )

    @model_validator(mode="after")
    def _default_within_max(self) -> RegistrySettings:
        if self.default_ttl_s > self.max_ttl_s:
            raise ValueError(
                f"default_ttl_s ({self.default_ttl_s}) must not exceed max_ttl_s ({self.max_ttl_s})"
            )
        return self
