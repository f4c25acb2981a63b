"""Quota arithmetic: what jobs request (count x task resources)."""

from __future__ import annotations

from collections.abc import Iterable

from tether.model import ZERO, JobSpec, Resources


def demand(spec: JobSpec) -> Resources:
    """What a job requests in total."""
    return spec.task.resources * spec.count


def total_demand(specs: Iterable[JobSpec]) -> Resources:
    """What several jobs request together; raises ResourceOverflow past the maximum quantity."""
    total = ZERO
    for spec in specs:
        total = total + demand(spec)
    return total
