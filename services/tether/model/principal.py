"""Principals: who a bearer token belongs to, and what the region lets them do."""

from __future__ import annotations

import enum
import hashlib
import secrets
from typing import Annotated

from pydantic import Field

from tether.model.base import NO_DUPLICATES, TetherModel
from tether.model.entitlement import Entitlement, Principal


class Role(enum.StrEnum):
    """Region-wide roles. Entitlement membership is kept on the entitlement, not here."""

    ADMIN = "admin"
    OPERATOR = "operator"
    """Runs the region's machines: schedules maintenance. Admins are operators too."""


class PrincipalRecord(TetherModel):
    """The identity behind one token; the store keeps it under the token's SHA-256 digest."""

    name: Principal
    roles: Annotated[list[Role], NO_DUPLICATES] = Field(default_factory=list)

    @property
    def is_admin(self) -> bool:
        """Whether the principal may use admin endpoints and see every entitlement."""
        return Role.ADMIN in self.roles

    @property
    def is_operator(self) -> bool:
        """Whether the principal may schedule and cancel maintenance."""
        return self.is_admin or Role.OPERATOR in self.roles

    def may_use(self, entitlement: Entitlement) -> bool:
        """Admins use every entitlement, others those that list them as members."""
        return self.is_admin or self.name in entitlement.members


def new_token() -> str:
    """A fresh random bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """The hex SHA-256 of a token: tokens themselves are never stored."""
    return hashlib.sha256(token.encode()).hexdigest()
