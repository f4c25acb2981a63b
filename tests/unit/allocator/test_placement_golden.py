"""Placement and `explain` give, choice by choice, what the golden file recorded for seeded
random regions and job streams (tests/support/placement_golden.py says how to regenerate it)."""

from __future__ import annotations

import logging

from tests.support.placement_golden import read_golden, record_all


def test_placements_and_explanations_match_the_golden_file() -> None:
    logging.getLogger("tether.allocator.index").setLevel(logging.ERROR)
    expected = read_golden()
    actual = record_all()
    assert len(actual) == len(expected)
    for number, (got, wanted) in enumerate(zip(actual, expected, strict=True)):
        # One choice at a time: the first that differs is the one to read.
        assert got == wanted, f"choice {number} (seed {wanted['seed']}, {wanted['job']}) differs"
