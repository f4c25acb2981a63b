"""Interned names and the codes the index's columns hold for them."""

from __future__ import annotations

from typing import Final

from tether.model import MachineState

NONE: Final = -1
"""Code of "no value": the free pool as owner, no host profile, a missing attribute."""
ABSENT: Final = -1
"""State code of a row without a machine record (an allocation record seen first, or deleted)."""
STATE_CODES: Final = {
    MachineState.UP: 0,
    MachineState.DRAINING: 1,
    MachineState.MAINTENANCE: 2,
    MachineState.DOWN: 3,
    MachineState.DECOMMISSIONED: 4,
}
UP: Final = STATE_CODES[MachineState.UP]
REGULAR, HARVEST, EVICTING = 0, 1, 2
"""Harvest codes: a regular machine, a harvest machine (its usable share is its capacity in the
columns), one whose host takes it back soon (an eviction notice)."""
DECOMMISSIONED: Final = STATE_CODES[MachineState.DECOMMISSIONED]


class Codes:
    """Interned names: each distinct string gets a small integer, in order of appearance."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, name: str) -> int:
        """The name's code, assigned now if the name is new."""
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def find(self, name: str | None) -> int:
        """The name's code, or NONE for None or a name never seen."""
        return NONE if name is None else self._codes.get(name, NONE)

    def name(self, code: int) -> str | None:
        return None if code == NONE else self.names[code]
