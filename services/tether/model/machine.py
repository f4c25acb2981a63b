"""Machines: one host of the region, its capacity, labels and lifecycle state."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from tether.model.base import AttributeKey, AttributeValue, Name, TetherModel, Timestamp
from tether.model.resources import Resources, quantity_text
from tether.model.topology import Topology


class MachineState(enum.StrEnum):
    """Whether a machine takes new tasks (only when up) and runs existing ones."""

    UP = "up"
    DRAINING = "draining"
    MAINTENANCE = "maintenance"
    DOWN = "down"
    DECOMMISSIONED = "decommissioned"
    """Taken out of the region for good (until the decommission is undone); holds no task."""


class Harvest(TetherModel):
    """A harvest machine's share of its hardware, as its agent reports it: other tenants'
    demand moves it at run time, and the host may take the machine back with a short warning."""

    usable: Resources
    """What the region's tasks may use now: at most the machine's `capacity` in every
    dimension. Tasks beyond it move off, the lowest priority first."""
    evict_by: Timestamp | None = None
    """The host takes the machine back at this moment (an eviction notice): it takes no new
    task, and its tasks move off before."""


def beyond_capacity(usable: Resources, capacity: Resources) -> str:
    """Every dimension in which `usable` exceeds `capacity`, e.g. "cpu 5000 millicores of 4000
    millicores" (empty when it fits)."""
    hardware = capacity.amounts()
    return ", ".join(
        f"{label} {quantity_text(label, amount)} of {quantity_text(label, hardware.get(label, 0))}"
        for label, amount in usable.amounts().items()
        if amount > hardware.get(label, 0)
    )


class HarvestStep(TetherModel):
    """One change in a harvest machine's capacity trace (`tether agent --harvest-trace`), from
    `at_s` seconds after its agent starts."""

    at_s: float = Field(ge=0, allow_inf_nan=False)
    usable: Resources | None = None
    """The new usable share (None: as before)."""
    evict_in_s: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """An eviction notice: the host takes the machine back this many seconds later."""


class Machine(TetherModel):
    """A machine as the resource broker records it."""

    id: Name
    hostname: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    topology: Topology
    hardware_type: Name
    capacity: Resources
    attributes: dict[AttributeKey, AttributeValue] = Field(default_factory=dict)
    host_profile_current: Name | None = None
    """The host profile the agent last finished switching to (None: never switched)."""
    state: MachineState = MachineState.UP
    down_since: Timestamp | None = None
    """When the health checker marked the machine down (None while it is not down, or when
    someone else did): the start of the wait before its at-most-once tasks run elsewhere."""
    harvest: Harvest | None = None
    """A harvest machine's usable share and eviction notice (None: a regular machine, all of
    its capacity the region's)."""

    @model_validator(mode="after")
    def _harvest_within_capacity(self) -> Machine:
        if self.harvest is not None and not self.harvest.usable.fits_in(self.capacity):
            beyond = beyond_capacity(self.harvest.usable, self.capacity)
            raise ValueError(f"harvest.usable exceeds the machine's capacity: {beyond}")
        return self

    def usable(self) -> Resources:
        """What the region's tasks may use of the machine."""
        return self.capacity if self.harvest is None else self.harvest.usable
