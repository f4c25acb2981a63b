"""Which state maintenance puts a machine in, and when that changes: pure decisions."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from tether.model import AdvanceNotice, MachineState

MAINTAINED_STATES = frozenset({MachineState.DRAINING, MachineState.MAINTENANCE})
"""States only maintenance sets: a machine in one of them without a notice goes back up."""


def maintenance_state(
    current: MachineState, notices: Iterable[AdvanceNotice], now: datetime
) -> MachineState | None:
    """The state `notices` (those naming the machine) call for, or None to leave it as it is.

    From the moment maintenance is scheduled until it starts, the machine drains: it takes no
    new tasks and keeps running the ones it has, which their controllers may move early. From
    the start to the end of the window it is in maintenance; afterwards it is up again. A down
    machine is the health checker's: it comes back up through its heartbeat, not through us.
    """
    if current is MachineState.DOWN:
        return None
    wanted = MachineState.UP
    for notice in notices:
        if notice.start <= now < notice.end:
            wanted = MachineState.MAINTENANCE
            break
        if now < notice.start:
            wanted = MachineState.DRAINING
    if wanted is MachineState.UP and current not in MAINTAINED_STATES:
        return None
    return None if wanted is current else wanted


def next_change(notices: Iterable[AdvanceNotice], now: datetime) -> datetime | None:
    """The next start or end of a window after `now`: when the states may change again."""
    moments = [m for notice in notices for m in (notice.start, notice.end) if m > now]
    return min(moments, default=None)
