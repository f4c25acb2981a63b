"""What the broker writes for an announced machine: pure decisions, no store access."""

from __future__ import annotations

from typing import Any, Final

from tether.model import AgentHeartbeat, Machine, MachineState

INVENTORY_FIELDS: Final = (
    "hostname",
    "topology",
    "hardware_type",
    "capacity",
    "attributes",
    "host_profile_current",
    "harvest",
)
"""What an agent announces and the broker copies (the agent is the authority on the profile it
has switched to and on a harvest machine's usable share); every other field belongs to someone
else."""


class HeartbeatMismatch(ValueError):
    """A heartbeat stored under another machine's key."""


def announced_machine(machine_id: str, heartbeat: AgentHeartbeat, dc: str) -> Machine | None:
    """The machine `heartbeat` announces, or None when it is in another datacenter."""
    if heartbeat.machine.id != machine_id:
        raise HeartbeatMismatch(
            f"heartbeat key names machine {machine_id!r} but its value is machine "
            f"{heartbeat.machine.id!r}"
        )
    if heartbeat.machine.topology.dc != dc:
        return None
    return heartbeat.machine


def _inventory(machine: Machine) -> dict[str, Any]:
    return {field: getattr(machine, field) for field in INVENTORY_FIELDS}


def record_for(announced: Machine, recorded: Machine | None) -> Machine | None:
    """The machine record to write, or None when `recorded` already says what was announced.

    A new machine starts `up`. A known one gets the announced inventory fields and keeps what
    others decided: its state (health checker, drains). Which entitlement owns the machine and
    the profile it should carry live in its allocation record, which the broker only creates.
    """
    if recorded is None:
        return Machine(id=announced.id, state=MachineState.UP, **_inventory(announced))
    if _inventory(recorded) == _inventory(announced):
        return None
    return Machine.model_validate({**dict(recorded), **_inventory(announced)})
