"""Entitlements: a team's quota in the region, arranged in a tree (org -> team -> sub-team)."""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from tether.model.base import (
    MAX_QUANTITY,
    NO_DUPLICATES,
    Name,
    NameList,
    Quantity,
    TetherModel,
    TextRule,
)
from tether.model.resources import Resources, from_amounts

Principal = Annotated[
    str,
    TextRule(
        r"^[a-z0-9._@-]{1,128}$",
        "must be 1-128 characters of a-z, 0-9, '.', '_', '@' and '-'",
        "invalid_principal",
    ),
]
"""A user or service identity, such as "alice@example.com"."""

DEFAULT_GRACE_S: Final = 30.0
"""How long a preempted task has, by default, between its notice and its stop."""
MAX_GRACE_S: Final = 3600.0


class Quota(TetherModel):
    """What an entitlement may use: resources, whole machines by hardware type, or both."""

    resources: Resources = Field(default_factory=Resources)
    machines: dict[Name, Quantity] = Field(default_factory=dict)
    """Machine count by hardware type."""


class PreemptionPolicy(TetherModel):
    """How the entitlement's tasks are preempted, and how much preempting its jobs may do."""

    grace_s: float = Field(default=DEFAULT_GRACE_S, ge=0, le=MAX_GRACE_S, allow_inf_nan=False)
    """Seconds between a task's PREEMPT notice (its controller is told) and its stop; the
    controller may let it go earlier, never later."""
    max_per_minute: Quantity = 120
    """Tasks this entitlement's jobs may preempt in any minute (its reclaims included)."""
    max_per_job_per_hour: Quantity = 6
    """Times one job of this entitlement may be preempted in any hour, against thrashing."""


class Entitlement(TetherModel):
    """A quota owned by a team, and who may submit jobs against it."""

    name: Name
    """A DNS label, as the pattern says; on `PUT /v1/entitlements/{name}`, the name in the path
    (422 otherwise)."""
    parent: Name | None = None
    """The parent entitlement: an existing one, not the entitlement itself nor one of its
    descendants (422 otherwise). A parent's quota bounds its whole subtree, and its children
    may borrow each other's idle quota."""
    quota: Quota = Field(default_factory=Quota)
    """Guaranteed: the entitlement gets this much back, by preemption if it was lent. At least
    its children's quotas together, and with its siblings' at most its parent's (422
    otherwise)."""
    borrowing_limit: Resources = Field(default_factory=Resources)
    """How far beyond its quota the entitlement (its subtree) may use its siblings' idle quota;
    nothing without a parent, and with the quota at most the parent's quota (422 otherwise).
    Nothing by default: the quota is the ceiling."""
    lending_limit: Resources | None = None
    """The most of its quota its siblings may borrow while it is idle: at most `quota.resources`
    in every dimension (422 otherwise); None: all of it."""
    preemption: PreemptionPolicy = Field(default_factory=PreemptionPolicy)
    host_profile: Name | None = None
    allowed_dcs: NameList = Field(default_factory=list)
    """Datacenters its tasks may run in; empty means all."""
    weight: int = Field(default=1, ge=1, le=1000)
    """Its share among its siblings when they compete for borrowed quota (weighted dominant
    resource fairness)."""
    members: Annotated[list[Principal], NO_DUPLICATES] = Field(default_factory=list)

    @field_validator("parent")
    @classmethod
    def _not_own_parent(cls, parent: str | None, info: ValidationInfo) -> str | None:
        if parent is not None and parent == info.data.get("name"):
            raise PydanticCustomError("own_parent", "an entitlement cannot be its own parent")
        return parent

    @field_validator("borrowing_limit")
    @classmethod
    def _borrows_with_parent(cls, limit: Resources, info: ValidationInfo) -> Resources:
        if not limit.is_zero() and info.data.get("parent", 0) is None:
            raise PydanticCustomError(
                "borrowing_without_parent",
                "only an entitlement with a parent can borrow: it borrows its siblings' idle quota",
            )
        return limit

    @field_validator("lending_limit")
    @classmethod
    def _lends_own_quota(cls, limit: Resources | None, info: ValidationInfo) -> Resources | None:
        quota = info.data.get("quota")
        if limit is not None and quota is not None and not limit.fits_in(quota.resources):
            raise PydanticCustomError(
                "lending_over_quota",
                "cannot lend more than its own quota ({over})",
                {"over": "; ".join(limit.shortfall(quota.resources))},
            )
        return limit

    @property
    def ceiling(self) -> Resources:
        """The most its tasks may hold: its quota plus what it may borrow."""
        amounts = self.quota.resources.amounts()
        for label, amount in self.borrowing_limit.amounts().items():
            amounts[label] = min(amounts.get(label, 0) + amount, MAX_QUANTITY)
        return from_amounts(amounts)

    @property
    def lendable(self) -> Resources:
        """The most of its quota others may borrow."""
        return self.quota.resources if self.lending_limit is None else self.lending_limit
