"""Accelerator jobs: what Gavel's heterogeneity-aware policies read of a batch job."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from tether.model.base import TetherModel

GPU_TYPE_ATTRIBUTE = "gpu_type"
"""The machine attribute naming its accelerator type (`v100`, `k80`, ...): where a Gavel job's
round places it, and the key of a throughput profile."""

JobType = Annotated[str, StringConstraints(min_length=1, max_length=200)]


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
