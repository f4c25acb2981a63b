"""The placement rules, in the order they apply and Explain reports them: written by hand, one
line a rule (docs/architecture.md, "Adding a placement rule")."""

from __future__ import annotations

from tether.allocator.rules import (
    affinity,
    constraints,
    datacenter,
    ephemeral,
    hardware,
    harvest,
    host_profile,
    min_worker_set,
    ownership,
    preferences,
    readable,
    resources,
    spread,
    state,
)
from tether.allocator.rules.base import Filter, Scorer

FILTERS: tuple[Filter, ...] = (
    state.StateUp(),
    harvest.Harvest(),
    datacenter.Datacenter(),
    hardware.HardwareType(),
    constraints.Constraints(),
    ownership.Ownership(),
    readable.Readable(),
    affinity.Affinities(),
    resources.Resources(),
    ephemeral.EphemeralResources(),
)
"""Hard rules: a machine any of them rejects takes no task of the job."""

SCORERS: tuple[Scorer, ...] = (
    min_worker_set.MinWorkerSet(),
    preferences.Preferences(),
    host_profile.HostProfile(),
)
"""Soft rules, most important first: each one's bits outweigh every later one's."""

SPREAD = spread.Spread
"""Ranks fault domains before any machine score; it keeps count of the plan's tasks per domain."""
