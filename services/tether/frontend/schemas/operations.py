"""Task operation requests (restart, move on request) and listings."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field, StringConstraints

from tether.frontend.schemas import View
from tether.model import Quantity, TaskOperation, TetherModel


class RequestedKind(enum.StrEnum):
    """Operations a job's owner may ask for; updates come from PATCH, moves for maintenance
    from the maintenance itself."""

    RESTART = "restart"
    MOVE = "move"


class OperationRequest(TetherModel):
    """The body of POST /v1/jobs/{ent}/{job}/operations."""

    kind: RequestedKind
    tasks: Annotated[list[Quantity], Field(min_length=1, max_length=100_000)] | None = None
    """Task indexes, each below the job's count (422 otherwise); default every task of the
    job."""
    reason: Annotated[str, StringConstraints(max_length=500)] = ""


class OperationList(View):
    operations: list[TaskOperation]
