"""Client settings: which frontend to call and with which token, defaulting to the local region."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.model import (
    DEFAULT_REGION_FILE,
    DEFAULT_STATE_DIR,
    RegionState,
    RegionStateError,
    read_region_state,
)

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TOKEN_FILE = DEFAULT_STATE_DIR / "admin.token"


def local_region() -> RegionState | None:
    """What `tether up` recorded in `.tether/region.json`; None without a readable one."""
    # A missing or unreadable region file just means "no local region": the defaults apply,
    # and a failing request names the URL it tried.
    try:
        return read_region_state(DEFAULT_REGION_FILE)
    except RegionStateError:
        return None


def default_url() -> str:
    """The local region's frontend URL from `.tether/region.json`, else DEFAULT_URL."""
    region = local_region()
    return region.url if region else DEFAULT_URL


def default_token() -> SecretStr | None:
    """The admin token of the local region: the file `.tether/region.json` names in
    `admin_token_file` (relative paths are relative to the current directory, like
    `.tether/` itself), else `.tether/admin.token`; None when there is none."""
    region = local_region()
    path = region.admin_token_file if region else DEFAULT_TOKEN_FILE
    try:
        token = path.read_text().strip()
    except OSError:
        return None
    return SecretStr(token) if token else None


class ClientSettings(BaseSettings):
    """How the SDK and the user verbs of the CLI reach a region's REST API."""

    model_config = SettingsConfigDict(env_prefix="TETHER_CLIENT_", extra="ignore")

    url: str = Field(
        default_factory=default_url,
        validation_alias=AliasChoices("url", "TETHER_URL", "TETHER_CLIENT_URL"),
        description="Base URL of a frontend, e.g. http://127.0.0.1:8080.",
    )
    token: SecretStr | None = Field(
        default_factory=default_token,
        validation_alias=AliasChoices("token", "TETHER_TOKEN", "TETHER_CLIENT_TOKEN"),
        description="Bearer token of the principal to act as.",
    )
    timeout_s: float = Field(default=10.0, gt=0, description="Deadline of one HTTP request.")
