"""The bodies of /healthz and /readyz when they succeed."""

from __future__ import annotations

from pydantic import Field

from tether.frontend.schemas import View


class Status(View):
    status: str
    """"ok" (/healthz) or "ready" (/readyz)."""


class Readiness(Status):
    warnings: list[str] = Field(default_factory=list)
    """What the region cannot do although this frontend serves: shards that hold entitlements
    but have no leader."""
