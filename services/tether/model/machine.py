"""Machines: one host of the region, its capacity, labels and lifecycle state."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field, StringConstraints

from tether.model.base import AttributeKey, AttributeValue, Name, TetherModel, Timestamp
from tether.model.resources import Resources
from tether.model.topology import Topology


class MachineState(enum.StrEnum):
    """Whether a machine takes new tasks (only when up) and runs existing ones."""

    UP = "up"
    DRAINING = "draining"
    MAINTENANCE = "maintenance"
    DOWN = "down"
    DECOMMISSIONED = "decommissioned"
    """Taken out of the region for good (until the decommission is undone); holds no task."""


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
