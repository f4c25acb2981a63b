"""Settings for every Tether process, read from TETHER_* environment variables."""

from __future__ import annotations

import ssl
from functools import lru_cache
from pathlib import Path

from pydantic import AliasChoices, Field, FilePath, SecretStr, model_validator
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


class TlsSettings(BaseSettings):
    """TLS for the process's own servers and clients (REST, gRPC, agents' log endpoints, metrics),
    read from TETHER_TLS_* environment variables; `tether certs init` makes the files."""

    model_config = SettingsConfigDict(env_prefix="TETHER_TLS_", extra="ignore")

    ca_file: FilePath | None = Field(
        default=None,
        description="The region's CA certificate. Set, every connection this process opens to "
        "another service uses TLS and trusts only servers it signed; under `mutual`, servers "
        "accept only clients it signed.",
    )
    cert_file: FilePath | None = Field(
        default=None,
        description="This process's certificate: set, its servers serve TLS only, and its "
        "clients show it to servers that ask (mutual TLS).",
    )
    key_file: FilePath | None = Field(default=None, description="The private key of cert_file.")
    server_name: str | None = Field(
        default=None,
        description="The name this process's clients check in other services' certificates "
        "instead of the address they connect to: for services that register addresses no "
        "certificate can list in advance (pod IPs). Every certificate of `tether certs init` "
        "carries services.tether.internal.",
    )
    mutual: bool = Field(
        default=False,
        description="Service-to-service servers (gRPC, agents' log endpoints) refuse a client "
        "without a certificate signed by ca_file. The REST API authenticates its callers by "
        "token and asks for no certificate.",
    )

    @model_validator(mode="after")
    def _complete(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together: set both or neither")
        if self.mutual and (self.ca_file is None or self.cert_file is None):
            raise ValueError("mutual TLS needs ca_file, cert_file and key_file")
        # Loaded once here, so that a wrong file stops the service with the files' names rather
        # than as a port it cannot bind (gRPC) or an OpenSSL error deep in a server's start.
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.ca_file is not None:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except ssl.SSLError as error:
                raise ValueError(
                    f"ca_file {self.ca_file}: not a PEM certificate ({error})"
                ) from None
        if self.cert_file is not None and self.key_file is not None:
            try:
                context.load_cert_chain(self.cert_file, self.key_file)
            except ssl.SSLError as error:
                raise ValueError(
                    f"cert_file {self.cert_file} and key_file {self.key_file}: not a PEM "
                    f"certificate and its own key ({error})"
                ) from None
        return self

    @property
    def serving(self) -> bool:
        """Whether this process's servers serve TLS."""
        return self.cert_file is not None

    @property
    def connecting(self) -> bool:
        """Whether this process's connections to other services use TLS."""
        return self.ca_file is not None
