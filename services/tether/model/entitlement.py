"""Entitlements: a team's quota in the region, arranged in an org -> team hierarchy."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from tether.model.base import NO_DUPLICATES, Name, NameList, Quantity, TetherModel, TextRule
from tether.model.resources import Resources

Principal = Annotated[
    str,
    TextRule(
        r"^[a-z0-9._@-]{1,128}$",
        "must be 1-128 characters of a-z, 0-9, '.', '_', '@' and '-'",
        "invalid_principal",
    ),
]
"""A user or service identity, such as "alice@example.com"."""


class Quota(TetherModel):
    """What an entitlement may use: resources, whole machines by hardware type, or both."""

    resources: Resources = Field(default_factory=Resources)
    machines: dict[Name, Quantity] = Field(default_factory=dict)
    """Machine count by hardware type."""


class Entitlement(TetherModel):
    """A quota owned by a team, and who may submit jobs against it."""

    name: Name
    parent: Name | None = None
    """The parent entitlement; not the entitlement itself."""
    quota: Quota = Field(default_factory=Quota)
    host_profile: Name | None = None
    allowed_dcs: NameList = Field(default_factory=list)
    """Datacenters its tasks may run in; empty means all."""
    weight: int = Field(default=1, ge=1)
    members: Annotated[list[Principal], NO_DUPLICATES] = Field(default_factory=list)

    @field_validator("parent")
    @classmethod
    def _not_own_parent(cls, parent: str | None, info: ValidationInfo) -> str | None:
        if parent is not None and parent == info.data.get("name"):
            raise PydanticCustomError("own_parent", "an entitlement cannot be its own parent")
        return parent
