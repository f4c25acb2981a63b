"""Maintenance requests and views."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Any, Final, Self

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tether.frontend.schemas import View
from tether.model import (
    MAX_MAINTENANCE_S,
    AdvanceNotice,
    MaintenanceKind,
    Name,
    PlannedMaintenanceKind,
    PlannedTime,
    TetherModel,
    Timestamp,
)

DomainPath = Annotated[str, StringConstraints(min_length=1, max_length=400)]
Reason = Annotated[str, StringConstraints(max_length=1000)]
DEFAULT_DRAIN_DEADLINE_S: Final = 300
"""How long a drained machine's tasks have to move when the request does not say."""


def _one_selector_schema(schema: dict[str, Any]) -> None:
    # What _one_selector checks: exactly one selector is given and not null.
    schema["oneOf"] = [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in ("machines", "msb", "rack")
    ]


class MaintenanceRequest(TetherModel):
    """The body of POST /v1/maintenance: which machines (exactly one of `machines`, `msb` and
    `rack`), from when and for how long."""

    model_config = ConfigDict(json_schema_extra=_one_selector_schema)

    machines: Annotated[list[Name], Field(min_length=1, max_length=100_000)] | None = None
    """Machine ids."""
    msb: DomainPath | None = None
    """Every machine of one main switchboard, as "<dc>/<msb>"."""
    rack: DomainPath | None = None
    """Every machine of one rack, as "<dc>/<msb>/<rack>"."""
    start: PlannedTime | None = None
    """When the machines go into maintenance (RFC 3339); default now, and at most a minute ago
    (422 otherwise: the frontend checks against its clock). Tasks are moved off them by then:
    from now on their controllers hear of it and may move them earlier."""
    duration_s: int = Field(gt=0, le=MAX_MAINTENANCE_S)
    # The schema lists only the planned kinds; _planned explains the others.
    kind: Annotated[
        MaintenanceKind,
        WithJsonSchema({"type": "string", "enum": [kind.value for kind in PlannedMaintenanceKind]}),
    ]
    reason: Reason = ""

    @field_validator("kind")
    @classmethod
    def _planned(cls, kind: MaintenanceKind) -> MaintenanceKind:
        if kind.value not in [planned.value for planned in PlannedMaintenanceKind]:
            raise PydanticCustomError(
                "drain_kind",
                "'{kind}' is not planned maintenance: an admin asks for it with "
                "POST /admin/machines/<id>/{kind}",
                {"kind": kind.value},
            )
        return kind

    @model_validator(mode="after")
    def _one_selector(self) -> Self:
        given = [name for name in ("machines", "msb", "rack") if getattr(self, name) is not None]
        if len(given) != 1:
            raise PydanticCustomError(
                "one_machine_selector",
                "name the machines with exactly one of 'machines', 'msb' and 'rack' (got {given})",
                {"given": ", ".join(given) or "none"},
            )
        return self


class MaintenancePhase(enum.StrEnum):
    SCHEDULED = "scheduled"
    """Not started: the machines drain, their tasks are moved as their controllers allow."""
    IN_PROGRESS = "in-progress"
    OVER = "over"
    """The machines are going back up; the notice is deleted shortly."""


class MaintenanceView(View):
    id: str
    machines: list[str]
    start: Timestamp
    end: Timestamp
    duration_s: int
    kind: MaintenanceKind
    reason: str
    phase: MaintenancePhase
    tasks: list[str]
    """Only these tasks move (a harvest machine's shrink); empty: every task on the machines."""

    @classmethod
    def of(cls, notice: AdvanceNotice, now: datetime) -> MaintenanceView:
        if now < notice.start:
            phase = MaintenancePhase.SCHEDULED
        elif now < notice.end:
            phase = MaintenancePhase.IN_PROGRESS
        else:
            phase = MaintenancePhase.OVER
        return cls(
            id=notice.id,
            machines=list(notice.machines),
            start=notice.start,
            end=notice.end,
            duration_s=notice.duration_s,
            kind=notice.kind,
            reason=notice.reason,
            phase=phase,
            tasks=list(notice.tasks),
        )


class MaintenanceList(View):
    maintenance: list[MaintenanceView]


class MachineDrainRequest(TetherModel):
    """The body of POST /admin/machines/{id}/drain and /decommission; it may be left out."""

    deadline_s: int = Field(default=DEFAULT_DRAIN_DEADLINE_S, ge=0, le=MAX_MAINTENANCE_S)
    """Seconds the tasks' controllers have to move them; then the rest are moved anyway (0: at
    once)."""
    reason: Reason = ""


class MachineDrainView(View):
    """The notice that drains (or decommissions) a machine."""

    machine: str
    created: bool
    """False: the machine was already draining or being decommissioned under `notice` (a
    decommission holds a drain too), and nothing changed."""
    notice: MaintenanceView


class MachineUndrainView(View):
    """What undoing a machine's drain and decommission cancelled."""

    machine: str
    cancelled: list[MaintenanceView]
    """The machine's drain and decommission notices, now deleted; empty when it had none."""
