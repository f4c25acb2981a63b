"""Client settings: which frontend to call and with which token, defaulting to the local region."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

REGION_FILE = Path(".tether/region.json")
"""Written by `tether up`: the local region's frontend `url` and its `admin_token_file`."""
DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TOKEN_FILE = Path(".tether/admin.token")


def _region_info() -> dict[str, Any]:
    # A missing or unreadable region file just means "no local region": the defaults apply,
    # and a failing request names the URL it tried.
    try:
        info = json.loads(REGION_FILE.read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def default_url() -> str:
    """The local region's frontend URL from `.tether/region.json`, else DEFAULT_URL."""
    url = _region_info().get("url")
    return url if isinstance(url, str) and url else DEFAULT_URL


def default_token() -> SecretStr | None:
    """The admin token of the local region: the file `.tether/region.json` names in
    `admin_token_file` (relative paths are relative to the current directory, like
    `.tether/` itself), else `.tether/admin.token`; None when there is none."""
    named = _region_info().get("admin_token_file")
    path = Path(named) if isinstance(named, str) and named else DEFAULT_TOKEN_FILE
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
