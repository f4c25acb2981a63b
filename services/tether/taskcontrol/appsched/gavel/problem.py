"""What a Gavel policy allocates, and the allocation it returns.

The active jobs, how fast each runs on each accelerator type, and how many accelerators of each
type there are."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
Allocation = F64
"""Jobs x accelerator types: the fraction of time each job runs on each type (its gang of
`scale_factor` accelerators of that type), every row summing to at most 1."""


@dataclass(frozen=True)
class AcceleratorJob:
    """One job as a policy sees it."""

    name: str
    scale_factor: int
    """Accelerators its gang holds at once, all of one type."""
    throughputs: Mapping[str, float]
    """Accelerator type -> steps per second of the whole gang on that type (absent or 0: the
    job cannot run there)."""
    weight: float = 1.0
    """Its priority weight: a weight of 2 asks for twice the share of a weight of 1."""
    remaining_steps: float = 0.0
    """Steps left to run (policies about finishing times read it)."""
    elapsed_s: float = 0.0
    """Seconds since the job arrived (finish-time fairness reads it)."""
    entity: str = ""
    """Whose job it is (its entitlement): the hierarchical policy shares by entity first."""
    running_on: str = ""
    """The accelerator type it ran on last round ("": none): the blind FIFO keeps it there."""


@dataclass(frozen=True)
class Problem:
    """Active jobs, oldest first, and the region's accelerators, as arrays in a fixed order."""

    jobs: tuple[str, ...]
    accelerators: tuple[str, ...]
    throughputs: F64
    """Jobs x accelerator types, steps per second (0: cannot run there)."""
    scale_factors: F64
    weights: F64
    counts: F64
    """Accelerators of each type."""
    remaining_steps: F64
    elapsed_s: F64
    entities: tuple[str, ...]
    entity_weights: F64
    """Per job, its entity's weight."""
    running_on: tuple[str, ...] = ()
    """Per job, the type it ran on last round ("": none)."""

    @classmethod
    def of(
        cls,
        jobs: Sequence[AcceleratorJob],
        counts: Mapping[str, int],
        entity_weights: Mapping[str, float] | None = None,
    ) -> Problem:
        """The problem of `jobs` (oldest first) on `counts` accelerators of each type; an
        entity `entity_weights` does not name weighs 1."""
        weights = entity_weights or {}
        _check(jobs, counts, weights)
        accelerators = tuple(sorted(counts))
        throughputs = np.array(
            [[job.throughputs.get(kind, 0.0) for kind in accelerators] for job in jobs],
            dtype=np.float64,
        ).reshape(len(jobs), len(accelerators))
        return cls(
            jobs=tuple(job.name for job in jobs),
            accelerators=accelerators,
            throughputs=throughputs,
            scale_factors=np.array([job.scale_factor for job in jobs], dtype=np.float64),
            weights=np.array([job.weight for job in jobs], dtype=np.float64),
            counts=np.array([counts[kind] for kind in accelerators], dtype=np.float64),
            remaining_steps=np.array([job.remaining_steps for job in jobs], dtype=np.float64),
            elapsed_s=np.array([job.elapsed_s for job in jobs], dtype=np.float64),
            entities=tuple(job.entity for job in jobs),
            entity_weights=np.array([weights.get(job.entity, 1.0) for job in jobs]),
            running_on=tuple(job.running_on for job in jobs),
        )

    def blind(self) -> Problem:
        """The problem with every type equally fast for every job (1 where it can run)."""
        return dataclasses.replace(self, throughputs=self.runnable().astype(np.float64))

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.jobs), len(self.accelerators)

    def runnable(self) -> npt.NDArray[np.bool_]:
        """Jobs x types: where a job can run (a throughput above 0)."""
        runs: npt.NDArray[np.bool_] = self.throughputs > 0
        return runs

    def equal_share(self) -> Allocation:
        """The heterogeneity-blind fair allocation: every job the same accelerator time per
        unit of weight (a gang of `scale_factor` gets 1/scale_factor of the time), as much as
        the accelerators allow, each job's time spread over the types it can run on in
        proportion to their counts. The heterogeneity-aware policies measure each job's
        throughput against what it gets here."""
        runs = self.runnable()
        spread = runs * self.counts
        totals = spread.sum(axis=1, keepdims=True)
        spread = np.divide(spread, totals, out=np.zeros_like(spread), where=totals > 0)
        asks = self.weights / self.scale_factors

        def at(level: float) -> Allocation:
            shares: Allocation = np.minimum(1.0, level * asks)[:, None] * spread
            return shares

        def fits(level: float) -> bool:
            load = (at(level) * self.scale_factors[:, None]).sum(axis=0)
            return bool(np.all(load <= self.counts * (1 + 1e-12)))

        # The level at which the busiest type is full (or every job runs all the time).
        low, high = 0.0, float(1.0 / asks.min()) if len(asks) else 0.0
        if fits(high):
            return at(high)
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        return at(low)

    def throughputs_over(self, per_job: F64) -> F64:
        """Each job's throughputs divided by its amount in `per_job` (0 where that is 0)."""
        column = per_job[:, None]
        scaled: F64 = np.divide(
            self.throughputs, column, out=np.zeros_like(self.throughputs), where=column > 0
        )
        return scaled

    def relative_to_equal_share(self) -> F64:
        """Throughputs over each job's throughput under `equal_share`."""
        return self.throughputs_over(self.effective_throughputs(self.equal_share()))

    def relative_to_fastest(self) -> F64:
        """Throughputs over each job's throughput on its fastest type."""
        return self.throughputs_over(self.throughputs.max(axis=1, initial=0.0))

    def effective_throughputs(self, allocation: Allocation) -> F64:
        """Per job, its steps per second under `allocation`."""
        rates: F64 = (self.throughputs * allocation).sum(axis=1)
        return rates


def _check(
    jobs: Sequence[AcceleratorJob], counts: Mapping[str, int], weights: Mapping[str, float]
) -> None:
    """Refuses what no policy can allocate, naming it."""
    problems = [f"{kind} count {count}" for kind, count in counts.items() if count < 0]
    problems += [
        f"entity {name} weight {weight}" for name, weight in weights.items() if weight <= 0
    ]
    for job in jobs:
        numbers = [job.weight, job.remaining_steps, job.elapsed_s, *job.throughputs.values()]
        if not all(math.isfinite(number) for number in numbers):
            problems.append(f"job {job.name}: a number that is not finite")
        elif job.scale_factor < 1 or job.weight <= 0:
            problems.append(f"job {job.name}: scale factor {job.scale_factor}, weight {job.weight}")
        elif job.remaining_steps < 0 or job.elapsed_s < 0 or min(numbers) < 0:
            problems.append(f"job {job.name}: a negative throughput, steps left or time elapsed")
    if problems:
        raise ValueError("not a problem a policy can allocate: " + "; ".join(problems))
