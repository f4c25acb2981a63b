"""Accelerator jobs for the Gavel simulator: Gavel's traces and continuous Poisson arrivals.

The arrivals are drawn as the paper's workload generator draws them
(../shared/data/gavel/README.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from contention.workload import LONG_U, SCALE_WEIGHTS, SCALES, SHORT_SHARE, SHORT_U

from tether.model.accelerator import ThroughputProfile
from tether.taskcontrol.appsched.gavel.problem import AcceleratorJob

REFERENCE_TYPE = "v100"
"""The accelerator a generated job's duration is drawn on."""
WORKLOADS = ("philly", "single-gpu")
"""How a generated job's scale factor is drawn: from the Philly distribution, or always 1 (the
generator of the paper's Figure 8)."""
TRACE_COLUMNS = 10


@dataclass(frozen=True, slots=True)
class TraceJob:
    name: str
    job_type: str
    total_steps: float
    scale_factor: int
    weight: float
    arrival_s: float

    def accelerator_job(self, profile: ThroughputProfile) -> AcceleratorJob:
        return AcceleratorJob(
            name=self.name,
            scale_factor=self.scale_factor,
            throughputs=profile.throughputs(self.job_type, self.scale_factor),
            weight=self.weight,
        )


def read_trace(path: Path) -> list[TraceJob]:
    """A Gavel trace: tab-separated job type, command, working directory, steps argument, data
    directory flag, total steps, scale factor, priority weight, SLO, arrival second."""
    jobs = []
    for number, line in enumerate(path.read_text().splitlines()):
        fields = line.split("\t")
        if len(fields) != TRACE_COLUMNS:
            raise ValueError(f"{path}:{number + 1}: {len(fields)} columns, not {TRACE_COLUMNS}")
        job_type, total_steps, scale_factor, weight, arrival = (
            fields[0],
            fields[5],
            fields[6],
            fields[7],
            fields[9],
        )
        jobs.append(
            TraceJob(
                f"j{number:05d}",
                job_type,
                float(total_steps),
                int(scale_factor),
                float(weight),
                float(arrival),
            )
        )
    return jobs


def poisson_jobs(
    profile: ThroughputProfile,
    *,
    jobs_per_hour: float,
    count: int,
    seed: int,
    workload: str = "philly",
) -> list[TraceJob]:
    """`count` jobs arriving at `jobs_per_hour`: a job type uniformly at random, a scale factor
    from the Philly distribution (1 where the type has no throughput at it) or, for the
    `single-gpu` workload, 1, and a run time of 60 * 10^u seconds on the reference type."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}: one of {', '.join(WORKLOADS)}")
    rng = np.random.default_rng(seed)
    types = profile.job_types
    jobs, at = [], 0.0
    for number in range(count):
        at += rng.exponential(3600 / jobs_per_hour)
        job_type = types[int(rng.integers(len(types)))]
        scale = int(rng.choice(SCALES, p=SCALE_WEIGHTS)) if workload == "philly" else 1
        if (job_type, scale) not in profile.table:
            scale = 1
        low, high = SHORT_U if rng.random() < SHORT_SHARE else LONG_U
        duration_s = 60 * 10 ** rng.uniform(low, high)
        rate = profile.throughputs(job_type, scale)[REFERENCE_TYPE]
        jobs.append(TraceJob(f"j{number:05d}", job_type, duration_s * rate, scale, 1.0, at))
    return jobs
