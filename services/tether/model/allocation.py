"""Allocation records: what is placed on one machine, the unit of optimistic concurrency."""

from __future__ import annotations

from functools import reduce

from pydantic import Field

from tether.model.base import JobHandle, Name, Quantity, TetherModel, Timestamp
from tether.model.resources import ZERO, Resources


class AllocationEntry(TetherModel):
    """One task holding resources on a machine."""

    job: JobHandle
    index: Quantity
    resources: Resources

    @property
    def task_id(self) -> str:
        """`<entitlement>/<job>/<index>`."""
        return f"{self.job}/{self.index}"

    @property
    def entitlement(self) -> str:
        """The entitlement the resources are charged to."""
        return self.job.split("/", 1)[0]


class Allocation(TetherModel):
    """Every task placed on one machine, keyed by task id (`<entitlement>/<job>/<index>`).

    Allocators change this record only in a transaction that compares its mod revision, so two
    allocators can never both fill the same free space.
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
    tasks: dict[str, AllocationEntry] = Field(default_factory=dict)

    def used(self) -> Resources:
        """The sum of the resources of every task on the machine."""
        return reduce(lambda total, entry: total + entry.resources, self.tasks.values(), ZERO)
