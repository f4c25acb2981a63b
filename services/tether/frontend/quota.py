"""Quota arithmetic: what jobs request (count x task resources) against an entitlement's quota."""

from __future__ import annotations

from collections.abc import Iterable

from tether.model import ZERO, JobSpec, ResourceOverflow, Resources


def demand(spec: JobSpec) -> Resources:
    """What a job requests in total."""
    return spec.task.resources * spec.count


def total_demand(specs: Iterable[JobSpec]) -> Resources:
    """What several jobs request together; raises ResourceOverflow past the maximum quantity."""
    total = ZERO
    for spec in specs:
        total = total + demand(spec)
    return total


def quota_shortfall(quota: Resources, specs: Iterable[JobSpec]) -> list[str]:
    """One line per dimension in which `specs` together request more than `quota`, e.g.
    "cpu: need 3000 millicores, 2000 free" (need: all the jobs; free: the quota); empty when
    they fit."""
    try:
        total = total_demand(specs)
    except ResourceOverflow as exc:
        return [f"{dimension}: beyond any quota" for dimension in exc.dimensions]
    return total.shortfall(quota)
