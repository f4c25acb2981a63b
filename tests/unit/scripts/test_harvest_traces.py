"""The harvest simulator's capacity traces (scripts/harvest/traces.py): seeded, within the
hardware, about 70% of the intervals at least 10 minutes, ended by an eviction notice."""

from __future__ import annotations

import sys

import numpy as np

from tests.support.scripts import SCRIPTS
from tether.model import Resources

sys.path.insert(0, str(SCRIPTS))

from harvest.traces import (  # scripts/ is on the path
    EVICTION_NOTICE_S,
    TraceShape,
    interval_s,
    trace,
)

HARDWARE = Resources(cpu=16000, memory_mib=65536)
DAY_S = 86_400.0


def test_about_seventy_percent_of_intervals_last_ten_minutes_or_more() -> None:
    rng = np.random.default_rng(1)
    intervals = np.array([interval_s(rng) for _ in range(20_000)])
    assert 0.68 < float(np.mean(intervals >= 600)) < 0.72
    assert intervals.min() >= 30


def test_a_trace_is_seeded_ordered_and_within_the_hardware() -> None:
    shape = TraceShape(min_share=0.25, evictions_per_hour=0.0)
    steps = list(trace(HARDWARE, DAY_S, shape, np.random.default_rng(7)))
    assert steps == list(trace(HARDWARE, DAY_S, shape, np.random.default_rng(7)))
    assert steps != list(trace(HARDWARE, DAY_S, shape, np.random.default_rng(8)))
    assert [s.at_s for s in steps] == sorted(s.at_s for s in steps)
    assert all(s.at_s < DAY_S for s in steps)
    for step in steps:
        assert step.usable is not None
        assert step.usable.fits_in(HARDWARE)
        assert step.usable.cpu >= 4000  # a quarter of the cores at least
        assert step.usable.memory_mib == HARDWARE.memory_mib


def test_an_eviction_ends_a_trace_with_its_notice() -> None:
    shape = TraceShape(evictions_per_hour=1.0)
    ended = 0
    for seed in range(20):
        steps = list(trace(HARDWARE, DAY_S, shape, np.random.default_rng(seed)))
        evictions = [step for step in steps if step.evict_in_s is not None]
        assert len(evictions) <= 1
        if evictions:
            assert steps[-1] == evictions[0]
            assert evictions[0].evict_in_s == EVICTION_NOTICE_S
            ended += 1
    assert ended >= 15  # at one an hour, a day-long trace is all but sure to end so
