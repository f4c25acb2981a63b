"""Entitlement views: the record, its shard, and what its jobs request and hold."""

from __future__ import annotations

from tether.frontend.schemas import View
from tether.model import Entitlement, Resources


class EntitlementView(View):
    entitlement: Entitlement
    shard: str | None
    """The scheduler shard that runs its jobs; null if the shard map has no entry for it."""
    requested: Resources
    """count x task resources summed over its jobs that are not being deleted."""
    allocated: Resources
    """What its tasks hold on machines (the allocations' sum)."""


class EntitlementList(View):
    entitlements: list[Entitlement]
