"""Task operations: disruptive actions on tasks that the job's TaskController approves first."""

from __future__ import annotations

import enum
from typing import Annotated, Final

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from tether.model.base import (
    NO_DUPLICATES,
    Identifier,
    JobHandle,
    Name,
    Quantity,
    TetherModel,
    Timestamp,
    Version,
)


class OperationKind(enum.StrEnum):
    """What an operation does to its tasks."""

    START = "start"
    STOP = "stop"
    RESTART = "restart"
    MOVE = "move"
    UPDATE = "update"
    PREEMPT = "preempt"


class OperationState(enum.StrEnum):
    """pending-approval -> approved -> done, or cancelled at any point before done."""

    PENDING_APPROVAL = "pending-approval"
    APPROVED = "approved"
    DONE = "done"
    CANCELLED = "cancelled"


OPEN_STATES: Final = frozenset({OperationState.PENDING_APPROVAL, OperationState.APPROVED})
"""Operations not yet executed or withdrawn."""


class TaskOperation(TetherModel):
    """An operation on some tasks of one job."""

    id: Identifier
    kind: OperationKind
    job: JobHandle
    tasks: Annotated[list[Quantity], Field(min_length=1), NO_DUPLICATES]
    """Task indexes."""
    reason: str
    state: OperationState = OperationState.PENDING_APPROVAL
    created_at: Timestamp
    updated_at: Timestamp
    deadline: Timestamp | None = None
    target_version: Version | None = Field(default=None, validate_default=True)
    """The version an update installs; required for update, forbidden otherwise."""
    target_machine: Name | None = None
    """Where a move goes; only for move, and None lets the allocator choose."""
    attempt: int | None = Field(default=None, ge=0)
    """The attempt of its task the operation acts on: a newer attempt (a restart, a new
    placement) overtakes it. None: any attempt."""
    notice: Identifier | None = None
    """The maintenance whose advance notice the operation answers (its deadline is the start)."""

    @field_validator("target_version")
    @classmethod
    def _version_iff_update(cls, version: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if kind is OperationKind.UPDATE and version is None:
            raise PydanticCustomError("missing_target_version", "an update needs a target version")
        if kind not in (None, OperationKind.UPDATE) and version is not None:
            raise PydanticCustomError(
                "unexpected_target_version",
                "only update operations take a target version, and this one is '{kind}'",
                {"kind": str(kind)},
            )
        return version

    @field_validator("target_machine")
    @classmethod
    def _machine_only_for_move(cls, machine: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if kind not in (None, OperationKind.MOVE) and machine is not None:
            raise PydanticCustomError(
                "unexpected_target_machine",
                "only move operations take a target machine, and this one is '{kind}'",
                {"kind": str(kind)},
            )
        return machine
