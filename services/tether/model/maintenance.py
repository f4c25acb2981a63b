"""Advance notices: planned maintenance on machines, announced to TaskControllers ahead of time."""

from __future__ import annotations

import enum
import hashlib
from datetime import datetime, timedelta
from typing import Annotated, Final

from pydantic import Field, StringConstraints

from tether.model.base import Identifier, NameList, TetherModel, Timestamp

# Taking a machine away for longer than a year is a decommission, not maintenance.
MAX_MAINTENANCE_S: Final = 366 * 24 * 3600
_ID_MAX: Final = 64
"""The longest `Identifier`."""


class MaintenanceKind(enum.StrEnum):
    """What the maintenance does to the machines."""

    REBOOT = "reboot"
    HARDWARE = "hardware"
    NETWORK = "network"
    POWER = "power"
    DRAIN = "drain"
    """An admin takes the machine out of service (`POST /admin/machines/{id}/drain`): draining
    for the whole window (the longest there is), its tasks moved by the start."""
    DECOMMISSION = "decommission"
    """An admin retires the machine: draining until the start, then decommissioned once no
    task is left on it, for good (the notice is never over) until undone."""
    EVICTION = "eviction"
    """A harvest machine's host takes it back at the start (its agent reported the notice):
    draining from the notice on, its tasks moved by the start. The broker writes and deletes
    it."""
    HARVEST_SHRINK = "harvest-shrink"
    """A harvest machine's usable share no longer holds its tasks: the `tasks` the notice
    names move off by the start; the machine stays up. The broker writes and deletes it."""


DRAIN_KINDS: Final = frozenset({MaintenanceKind.DRAIN, MaintenanceKind.DECOMMISSION})
"""Kinds only an admin asks for, one notice per machine (`drain_id`), not planned maintenance."""
HARVEST_KINDS: Final = frozenset({MaintenanceKind.EVICTION, MaintenanceKind.HARVEST_SHRINK})
"""Kinds only the broker writes, from a harvest machine's reports, one notice per machine."""


class PlannedMaintenanceKind(enum.StrEnum):
    """The kinds of planned maintenance (`POST /v1/maintenance`, `tether maintenance schedule`):
    every `MaintenanceKind` but the drains."""

    REBOOT = MaintenanceKind.REBOOT.value
    HARDWARE = MaintenanceKind.HARDWARE.value
    NETWORK = MaintenanceKind.NETWORK.value
    POWER = MaintenanceKind.POWER.value


def drain_id(kind: MaintenanceKind, machine_id: str) -> str:
    """The id of the machine's drain or decommission notice, `<kind>-<machine>`: the same for
    every request, so that a repeated one finds the first. A machine id too long for an
    `Identifier` is cut and completed with a digest of the whole."""
    if kind not in DRAIN_KINDS | HARVEST_KINDS:
        raise ValueError(f"{kind} is planned maintenance, not a drain")
    whole = f"{kind.value}-{machine_id}"
    if len(whole) <= _ID_MAX:
        return whole
    digest = hashlib.sha256(machine_id.encode()).hexdigest()[:12]
    return f"{whole[: _ID_MAX - len(digest) - 1]}-{digest}"


class AdvanceNotice(TetherModel):
    """Machines that will be unavailable from `start` for `duration_s` seconds."""

    id: Identifier
    machines: Annotated[NameList, Field(min_length=1)]
    start: Timestamp
    duration_s: int = Field(gt=0, le=MAX_MAINTENANCE_S)
    kind: MaintenanceKind
    reason: str = ""
    tasks: list[Annotated[str, StringConstraints(min_length=1, max_length=512)]] = Field(
        default_factory=list
    )
    """Only these tasks move (`<entitlement>/<job>/<index>`); empty: every task on the
    machines."""

    def names(self, task: str) -> bool:
        """Whether the task (`<entitlement>/<job>/<index>`) must move for this notice."""
        return not self.tasks or task in self.tasks

    @property
    def end(self) -> datetime:
        """When the maintenance is over."""
        return self.start + timedelta(seconds=self.duration_s)
