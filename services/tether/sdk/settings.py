"""Client settings: which frontend to call and with which token, defaulting to the local region."""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.model import (
    DEFAULT_STATE_DIR,
    REGION_FILE_NAME,
    RegionState,
    RegionStateError,
    read_region_state,
)

DEFAULT_URL = "http://127.0.0.1:8080"
TOKEN_FILE_NAME = "admin.token"


def local_region(region_dir: Path = DEFAULT_STATE_DIR) -> RegionState | None:
    """What `tether up` recorded in `<region_dir>/region.json`; None without a readable one."""
    # A missing or unreadable region file just means "no local region": the defaults apply,
    # and a failing request names the URL it tried.
    try:
        return read_region_state(region_dir / REGION_FILE_NAME)
    except RegionStateError:
        return None


def region_url(region_dir: Path) -> str:
    """The frontend URL the region in `region_dir` recorded, else DEFAULT_URL."""
    region = local_region(region_dir)
    return region.url if region else DEFAULT_URL


def region_token(region_dir: Path) -> SecretStr | None:
    """The admin token of the region in `region_dir`: the file its region.json names in
    `admin_token_file` (a relative path is relative to the current directory, as `--dir` was
    when `tether up` wrote it), else `<region_dir>/admin.token`; None when there is none."""
    region = local_region(region_dir)
    path = region.admin_token_file if region else region_dir / TOKEN_FILE_NAME
    try:
        token = path.read_text().strip()
    except OSError:
        return None
    return SecretStr(token) if token else None


def region_ca_file(region_dir: Path) -> Path | None:
    """The CA certificate of the region in `region_dir` when it serves TLS (`tether up --tls`)."""
    region = local_region(region_dir)
    return region.ca_file if region else None


class ClientSettings(BaseSettings):
    """How the SDK and the user verbs of the CLI reach a region's REST API."""

    model_config = SettingsConfigDict(env_prefix="TETHER_CLIENT_", extra="ignore")

    region_dir: Path = Field(
        default=DEFAULT_STATE_DIR,
        validation_alias=AliasChoices("region_dir", "TETHER_REGION_DIR"),
        description="The directory of a region `tether up` runs, whose region.json gives the "
        "url and token when they are not set.",
    )
    url: str = Field(
        default_factory=lambda data: region_url(data["region_dir"]),
        validation_alias=AliasChoices("url", "TETHER_URL", "TETHER_CLIENT_URL"),
        description="Base URL of a frontend, e.g. http://127.0.0.1:8080.",
    )
    token: SecretStr | None = Field(
        default_factory=lambda data: region_token(data["region_dir"]),
        validation_alias=AliasChoices("token", "TETHER_TOKEN", "TETHER_CLIENT_TOKEN"),
        description="Bearer token of the principal to act as.",
    )
    ca_file: Path | None = Field(
        default_factory=lambda data: region_ca_file(data["region_dir"]),
        validation_alias=AliasChoices("ca_file", "TETHER_CA_FILE", "TETHER_TLS_CA_FILE"),
        description="The CA certificate that signed the frontend's (a region's own CA); "
        "without one, an https:// frontend is verified against the system's CAs.",
    )
    timeout_s: float = Field(default=10.0, gt=0, description="Deadline of one HTTP request.")
