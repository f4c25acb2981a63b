"""Advance notices: planned maintenance on machines, announced to TaskControllers ahead of time."""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Annotated, Final

from pydantic import Field

from tether.model.base import Identifier, NameList, TetherModel, Timestamp

# Taking a machine away for longer than a year is a decommission, not maintenance.
MAX_MAINTENANCE_S: Final = 366 * 24 * 3600


class MaintenanceKind(enum.StrEnum):
    """What the maintenance does to the machines."""

    REBOOT = "reboot"
    HARDWARE = "hardware"
    NETWORK = "network"
    POWER = "power"


class AdvanceNotice(TetherModel):
    """Machines that will be unavailable from `start` for `duration_s` seconds."""

    id: Identifier
    machines: Annotated[NameList, Field(min_length=1)]
    start: Timestamp
    duration_s: int = Field(gt=0, le=MAX_MAINTENANCE_S)
    kind: MaintenanceKind
    reason: str = ""

    @property
    def end(self) -> datetime:
        """When the maintenance is over."""
        return self.start + timedelta(seconds=self.duration_s)
