"""The answer to creating a principal: the only time its token is shown."""

from __future__ import annotations

from tether.frontend.schemas import View
from tether.model import Role


class NewPrincipal(View):
    name: str
    roles: list[Role]
    token: str
    """The bearer token; the region keeps only its SHA-256, so it cannot be shown again."""
