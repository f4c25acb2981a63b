"""Which state maintenance puts a machine in, and when that changes: pure decisions."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Final

from tether.model import AdvanceNotice, MachineState, MaintenanceKind

MAINTAINED_STATES = frozenset(
    {MachineState.DRAINING, MachineState.MAINTENANCE, MachineState.DECOMMISSIONED}
)
"""States only maintenance sets: a machine in one of them without a notice goes back up."""
_RANK: Final = {
    MachineState.UP: 0,
    MachineState.DRAINING: 1,
    MachineState.MAINTENANCE: 2,
    MachineState.DECOMMISSIONED: 3,
}
"""Which state wins when several notices name a machine: the one that holds it most."""


def maintenance_state(
    current: MachineState,
    notices: Iterable[AdvanceNotice],
    now: datetime,
    *,
    empty: bool = False,
) -> MachineState | None:
    """The state `notices` (those naming the machine) call for, or None to leave it as it is;
    `empty`: no task is allocated on the machine (only asked when `awaits_empty`).

    From the moment maintenance is scheduled until it starts, the machine drains: it takes no
    new tasks and keeps running the ones it has, which their controllers may move early. From
    the start to the end of the window it is in maintenance; afterwards it is up again. A drain
    or an eviction keeps it draining for the whole window; a harvest shrink leaves it up (only
    the tasks it names move). A decommission keeps it draining until its start,
    then until its last task is gone, and from then on it is decommissioned, past the end of
    the window too (only deleting the notice returns it). A down machine is the health
    checker's: it comes back up through its heartbeat, not through us; only an empty one whose
    decommission is due becomes decommissioned.
    """
    wanted = MachineState.UP
    for notice in notices:
        wanted = max(wanted, _called_for(notice, current, now, empty), key=_RANK.__getitem__)
    if current is MachineState.DOWN and wanted is not MachineState.DECOMMISSIONED:
        return None
    if wanted is MachineState.UP and current not in MAINTAINED_STATES:
        return None
    return None if wanted is current else wanted


def _called_for(
    notice: AdvanceNotice, current: MachineState, now: datetime, empty: bool
) -> MachineState:
    if notice.kind is MaintenanceKind.HARVEST_SHRINK:
        return MachineState.UP  # only the tasks it names move; the rest of the machine serves
    if now < notice.start:
        return MachineState.DRAINING
    if notice.kind is MaintenanceKind.DECOMMISSION:
        # Once decommissioned it stays so: nothing is placed on a machine that is not up.
        done = empty or current is MachineState.DECOMMISSIONED
        return MachineState.DECOMMISSIONED if done else MachineState.DRAINING
    if now >= notice.end:
        return MachineState.UP
    draining = notice.kind in (MaintenanceKind.DRAIN, MaintenanceKind.EVICTION)
    return MachineState.DRAINING if draining else MachineState.MAINTENANCE


def awaits_empty(current: MachineState, notices: Iterable[AdvanceNotice], now: datetime) -> bool:
    """Whether the machine's state depends on tasks being left on it: a decommission of it is
    due and it is not decommissioned yet."""
    return current is not MachineState.DECOMMISSIONED and any(
        notice.kind is MaintenanceKind.DECOMMISSION and notice.start <= now for notice in notices
    )


def is_over(notice: AdvanceNotice, now: datetime) -> bool:
    """Whether the notice's window has ended, so it can be deleted; a decommission never ends."""
    return notice.kind is not MaintenanceKind.DECOMMISSION and notice.end <= now


def next_change(notices: Iterable[AdvanceNotice], now: datetime) -> datetime | None:
    """The next start or end of a window after `now`: when the states may change again."""
    moments = [
        moment
        for notice in notices
        # A decommission's end changes nothing.
        for moment in (
            (notice.start,)
            if notice.kind is MaintenanceKind.DECOMMISSION
            else (notice.start, notice.end)
        )
        if moment > now
    ]
    return min(moments, default=None)
