"""Accelerator jobs and throughput profiles: what Gavel's policies read of a job and of speeds.

A throughput profile holds the measured steps per second of each job type, at each scale
factor, on each accelerator type, in the format of Gavel's `isolated_throughputs.json`:
`{accelerator type: {job type: {scale factor: steps per second}}}`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field, StringConstraints, WithJsonSchema, field_validator

from tether.model.base import JobHandle, Name, TetherModel, Timestamp

GPU_TYPE_ATTRIBUTE = "gpu_type"
"""The machine attribute naming its accelerator type (`v100`, `k80`, ...): where a Gavel job's
round places it, and the key of a throughput profile."""

JobType = Annotated[str, StringConstraints(min_length=1, max_length=200)]

SCALE_FACTOR_PATTERN = r"^0*[1-9][0-9]*$"
"""A scale factor as a profile's key: a whole number of 1 or more."""
Throughputs = Annotated[
    dict[str, dict[str, dict[str, float]]],
    # What ThroughputProfile.parse checks, for clients to know before they send it.
    WithJsonSchema(
        {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "propertyNames": {"pattern": SCALE_FACTOR_PATTERN},
                    "additionalProperties": {"type": "number", "minimum": 0},
                },
            },
        }
    ),
]
"""{accelerator type: {job type: {scale factor: steps per second}}}, the format of Gavel's
isolated_throughputs.json."""


class AcceleratorSpec(TetherModel):
    """A training job for Gavel's policies (`tether appsched gavel`): its tasks are a gang of
    `scale_factor` workers, one accelerator each, that together make `total_steps` steps at
    the speed the throughput profile gives its `job_type` on each accelerator type."""

    job_type: JobType = Field(
        description="Its row in the throughput profile, e.g. 'ResNet-50 (batch size 64)'."
    )
    total_steps: float = Field(gt=0, allow_inf_nan=False, description="Steps to finish.")
    scale_factor: int = Field(
        ge=1, description="Workers in its gang, one accelerator each: the job's task count."
    )


class ThroughputProfileRecord(TetherModel):
    """A throughput profile kept in the region, `throughput-profiles/<entitlement>/<name>`:
    its members' application-level schedulers read it (`tether appsched gavel
    --profile ENTITLEMENT/NAME`)."""

    name: Name
    entitlement: Name
    throughputs: Throughputs = Field(
        description="{accelerator type: {job type: {scale factor: steps per second}}}, the "
        "format of Gavel's isolated_throughputs.json."
    )

    @field_validator("throughputs")
    @classmethod
    def _a_profile(
        cls, throughputs: dict[str, dict[str, dict[str, float]]]
    ) -> dict[str, dict[str, dict[str, float]]]:
        ThroughputProfile.parse(throughputs, source="throughputs")
        return throughputs


class ProfileError(ValueError):
    """A profile that is not in the expected format; the message names where."""


@dataclass(frozen=True)
class ThroughputProfile:
    """Job type and scale factor -> accelerator type -> steps per second."""

    table: Mapping[tuple[str, int], Mapping[str, float]]

    @classmethod
    def load(cls, path: Path) -> ThroughputProfile:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ProfileError(f"{path}: {error}") from None
        return cls.parse(data, source=str(path))

    @classmethod
    def parse(cls, data: object, *, source: str = "profile") -> ThroughputProfile:
        table: dict[tuple[str, int], dict[str, float]] = {}
        for accelerator, jobs in _mapping(data, source).items():
            for job_type, factors in _mapping(jobs, f"{source}: {accelerator}").items():
                where = f"{source}: {accelerator} / {job_type}"
                for factor, rate in _mapping(factors, where).items():
                    if not (factor.isascii() and factor.isdigit()) or int(factor) < 1:
                        raise ProfileError(f"{where}: scale factor {factor!r} is not 1 or more")
                    if (
                        isinstance(rate, bool)
                        or not isinstance(rate, int | float)
                        or not math.isfinite(rate)
                        or rate < 0
                    ):
                        raise ProfileError(
                            f"{where} / {factor}: {rate!r} is not a number of steps per second"
                        )
                    table.setdefault((job_type, int(factor)), {})[accelerator] = float(rate)
        return cls(table)

    def throughputs(self, job_type: str, scale_factor: int) -> dict[str, float]:
        """Accelerator type -> steps per second of a gang of `scale_factor` of that type."""
        found = self.table.get((job_type, scale_factor))
        if found is None:
            raise ProfileError(
                f"the profile has no throughput for {job_type!r} at scale factor {scale_factor}"
            )
        return dict(found)

    @property
    def job_types(self) -> list[str]:
        return sorted({job_type for job_type, _ in self.table})


def _mapping(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        raise ProfileError(f"{where}: expected an object, found {type(value).__name__}")
    return value


Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""A fraction of the time."""


class AcceleratorShare(TetherModel):
    """One accelerator job in a Gavel runner's report: where it runs this round, the time the
    policy's allocation gives it on each accelerator type, and what it received so far."""

    job: JobHandle
    running_on: str = ""
    """The accelerator type it runs on this round; empty: it waits this round."""
    allocation: dict[str, Share] = Field(default_factory=dict)
    """Accelerator type -> the fraction of the time the allocation gives it there."""
    received: dict[str, Share] = Field(default_factory=dict)
    """Accelerator type -> the fraction of the time since the allocation was made that it ran
    there."""


class AcceleratorRound(TetherModel):
    """What a Gavel runner (`tether appsched gavel`) reports after each round of an
    entitlement's accelerator jobs."""

    policy: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    """The policy's name, as `tether appsched gavel --policy` takes it."""
    round_s: float = Field(gt=0, allow_inf_nan=False)
    rounds: int = Field(ge=0)
    accelerators: dict[str, int] = Field(default_factory=dict)
    """Accelerator type -> how many the rounds share out."""
    jobs: list[AcceleratorShare] = Field(default_factory=list, max_length=10_000)


class AcceleratorReport(AcceleratorRound):
    """The last round an entitlement's Gavel runner reported, as the store keeps it."""

    entitlement: Name
    updated_at: Timestamp
