"""Allocation records: a machine's owner (the unit of optimistic concurrency) and its tasks."""

from __future__ import annotations

from tether.model.base import Name, TetherModel, Timestamp


class Allocation(TetherModel):
    """Who a machine belongs to, and the version of everything placed on it.

    The tasks on the machine are its allocation entries, one key each under this record
    (`keys.allocation_entry`, the task's `Resources` as value). Every transaction that adds or
    removes entries also rewrites this record and compares its mod revision, so the record's
    mod revision orders all changes to the machine and two allocators can never both fill the
    same free space.
    """

    machine: Name
    entitlement: Name | None = None
    """The entitlement the machine belongs to; None is the free pool. Allocators move machines
    between the two in the same transaction that places tasks, so ownership and what a machine
    holds never disagree."""
    host_profile: Name | None = None
    """The host profile the machine should carry (its entitlement's); the agent switches to it
    before it starts tasks."""
    idle_since: Timestamp | None = None
    """When the last task left a machine of an entitlement; it returns to the free pool after
    the allocator's idle delay."""
