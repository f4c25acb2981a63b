"""TaskController registrations: which application-level scheduler decides for which jobs."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from tether.model.base import Identifier, JobHandle, Name, TetherModel, TextRule, Timestamp
from tether.model.entitlement import Principal

Endpoint = Annotated[
    str,
    TextRule(
        r"^[A-Za-z0-9.-]{1,253}:[0-9]{1,5}$|^\[[0-9A-Fa-f:.]{2,45}\]:[0-9]{1,5}$",
        "must be 'host:port' (an IPv6 address in brackets, '[::1]:50051')",
        "invalid_endpoint",
    ),
]
"""Where a controller serves TaskController: `host:port` for a gRPC channel."""


class ControllerRegistration(TetherModel):
    """An application-level scheduler's endpoint for one job or a whole entitlement; the key
    lives on its own lease, so a registration nobody renews lapses by itself."""

    id: Identifier
    entitlement: Name
    job: JobHandle | None = None
    """The one job it decides for; None: every job of the entitlement."""
    endpoint: Endpoint
    principal: Principal
    """Who registered it (the bearer token's principal)."""
    ttl_s: int = Field(ge=1)
    lease: int = Field(ge=0)
    expires_at: Timestamp

    @model_validator(mode="after")
    def _job_in_entitlement(self) -> Self:
        if self.job is not None and self.job.split("/")[0] != self.entitlement:
            raise PydanticCustomError(
                "job_outside_entitlement",
                "job '{job}' is not in entitlement '{entitlement}'",
                {"job": self.job, "entitlement": self.entitlement},
            )
        port = int(self.endpoint.rsplit(":", 1)[1])
        if not 1 <= port <= 65535:
            raise PydanticCustomError(
                "invalid_endpoint_port",
                "endpoint port must be 1-65535, got {port}",
                {"port": port},
            )
        return self


class ControlStatus(TetherModel):
    """How asking a job's controller goes, as `tether job show` reports it. The sequence number
    lives here so that it keeps growing across scheduler leaders."""

    sequence: int = Field(default=0, ge=0)
    """The last sequence number sent to a controller for the job."""
    controller: str = ""
    """The endpoint last called."""
    error: str = ""
    """Why the last call failed ("" when it succeeded)."""
    failures: int = Field(default=0, ge=0)
    """Calls that failed in a row."""
    updated_at: Timestamp | None = None
