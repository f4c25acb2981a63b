"""Seeded capacity traces of harvest machines (`tether agent --harvest-trace` steps), shaped by
the Harvest VM study's figures: about 70% of the intervals between CPU changes last at least
10 minutes, the rest from half a minute up; evictions come with a 30 s notice."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np

from tether.model import Resources
from tether.model.machine import HarvestStep

LONG_SHARE: Final = 0.7
"""Intervals of 10 minutes or more (Harvest VMs: about 70% keep their CPU count that long)."""
SHORT_S: Final = (30.0, 600.0)
LONG_S: Final = (600.0, 4 * 3600.0)
"""Each interval is log-uniform within its range."""
EVICTION_NOTICE_S: Final = 30.0
"""The warning a host gives before it takes a harvest machine back (Azure's is 30 s)."""


@dataclass(frozen=True, slots=True)
class TraceShape:
    """What a trace looks like: the share of the hardware it keeps at least, and how often a
    machine is evicted (per hour)."""

    min_share: float = 0.25
    evictions_per_hour: float = 0.01


def interval_s(rng: np.random.Generator) -> float:
    """One interval between changes."""
    low, high = LONG_S if rng.random() < LONG_SHARE else SHORT_S
    return float(math.exp(rng.uniform(math.log(low), math.log(high))))


def trace(
    capacity: Resources, horizon_s: float, shape: TraceShape, rng: np.random.Generator
) -> Iterator[HarvestStep]:
    """The steps of one machine's trace up to `horizon_s`: its CPU share changes after each
    interval (whole cores, at least `min_share` of them), and an eviction ends it."""
    cores = capacity.cpu // 1000
    least = max(1, math.ceil(cores * shape.min_share))
    at = 0.0
    while True:
        gap = interval_s(rng)
        at += gap
        if at >= horizon_s:
            return
        # Evictions come as a Poisson process: the chance of one within this interval.
        if rng.random() < 1 - math.exp(-shape.evictions_per_hour * gap / 3600):
            yield HarvestStep(at_s=round(at, 1), evict_in_s=EVICTION_NOTICE_S)
            return
        usable = capacity.model_copy(update={"cpu": int(rng.integers(least, cores + 1)) * 1000})
        yield HarvestStep(at_s=round(at, 1), usable=usable)
