"""The bodies of /healthz and /readyz when they succeed."""

from __future__ import annotations

from tether.frontend.schemas import View


class Status(View):
    status: str
    """"ok" (/healthz) or "ready" (/readyz)."""
