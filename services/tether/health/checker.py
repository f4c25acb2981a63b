"""The health checker's decisions: when a machine goes down or comes back, from heartbeat times.

Times are monotonic seconds passed in by the caller, so that everything here is a pure function
of its arguments (or of an `Absences`'s state and those arguments).
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.model import MachineState


def next_state(
    state: MachineState, heartbeat: bool, missing_for_s: float, grace_s: float
) -> MachineState | None:
    """The state to set, or None to leave the machine alone.

    Only `up` and `down` are flipped: drains and maintenance are someone else's decision.
    """
    if state is MachineState.UP and not heartbeat and missing_for_s >= grace_s:
        return MachineState.DOWN
    if state is MachineState.DOWN and heartbeat:
        return MachineState.UP
    return None


class Absences:
    """Since when each machine's heartbeat has been missing.

    A heartbeat that disappears while the checker watches is missing from that moment. A machine
    that has had no heartbeat since before the checker started counts from the start: after a
    region restart, agents get the whole grace period to come back.
    """

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self._since: dict[str, float] = {}

    def machines_present(self, machine_ids: Iterable[str], heartbeats: set[str]) -> None:
        """Records the machines known at the checker's start without a heartbeat."""
        for machine_id in machine_ids:
            if machine_id not in heartbeats:
                self._since.setdefault(machine_id, self.started_at)

    def machine_seen(self, machine_id: str, now: float) -> None:
        """A machine record appeared without a heartbeat: missing from now on, at the latest."""
        self._since.setdefault(machine_id, now)

    def heartbeat_gone(self, machine_id: str, now: float) -> None:
        self._since[machine_id] = now

    def forget(self, machine_id: str) -> None:
        """The heartbeat is back (after the checker acted on it), or the machine is gone."""
        self._since.pop(machine_id, None)

    def missing_for(self, machine_id: str, now: float) -> float | None:
        """Seconds the heartbeat has been missing; None if it is not known to be missing."""
        since = self._since.get(machine_id)
        return None if since is None else now - since

    def missing(self) -> list[str]:
        """Every machine whose heartbeat is known to be missing."""
        return list(self._since)
