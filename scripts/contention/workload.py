"""The contention simulator's region and arrivals: an entitlement tree, GPU machines, and Poisson
job arrivals whose sizes and durations follow the Philly distributions Gavel's paper uses."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from tether.model import (
    Entitlement,
    FaultDomain,
    Job,
    JobKind,
    JobSpec,
    Machine,
    Placement,
    Quota,
    Resources,
    Spread,
    TaskTemplate,
    Topology,
)

EPOCH = datetime(2026, 1, 5, tzinfo=UTC)
"""Simulated time zero."""
GPUS_PER_MACHINE = 8
TASK = Resources(cpu=8_000, memory_mib=64 * 1024, gpus=1)
"""One worker: one GPU and its share of the machine."""
MACHINE = TASK * GPUS_PER_MACHINE
NORMAL_PRIORITY, HIGH_PRIORITY = 100, 300
NON_PREEMPTIBLE_PRIORITY = 500

ORGS = {"org-a": 3, "org-b": 1}
TEAMS = {"t1": 1, "t2": 1, "t3": 2}
"""Teams of every org, with their weights."""

# Philly (../shared/data/gavel/README.md): workers per job, and duration 60 * 10^u seconds.
SCALES = (1, 2, 4, 8)
SCALE_WEIGHTS = (0.7, 0.1, 0.15, 0.05)
SHORT_U, LONG_U, SHORT_SHARE = (1.5, 3.0), (3.0, 4.0), 0.8


def mean_gpu_seconds() -> float:
    """The expected GPU-seconds of one job: what turns a load into an arrival rate."""
    scale = sum(s * w for s, w in zip(SCALES, SCALE_WEIGHTS, strict=True))

    def mean_of(low: float, high: float) -> float:
        return 60 * (10**high - 10**low) / ((high - low) * math.log(10))

    duration = SHORT_SHARE * mean_of(*SHORT_U) + (1 - SHORT_SHARE) * mean_of(*LONG_U)
    return float(scale * duration)


def team_names() -> list[str]:
    return [f"{org}/{team}" for org in ORGS for team in TEAMS]


def entitlement_name(team: str) -> str:
    return team.replace("/", "-")


def targets() -> dict[str, float]:
    """Each team's weighted share of the region: its org's share times its share in the org."""
    org_total, team_total = sum(ORGS.values()), sum(TEAMS.values())
    return {
        f"{org}/{team}": ORGS[org] / org_total * weight / team_total
        for org in ORGS
        for team, weight in TEAMS.items()
    }


def entitlements(machines: int, guaranteed: float) -> list[Entitlement]:
    """region -> orgs (3:1) -> teams (1:1:2 each). Every level guarantees `guaranteed` of its
    weighted share of its parent; the rest is borrowed, by weighted dominant share."""
    whole = MACHINE * machines
    unlimited = whole
    found = [Entitlement(name="region", quota=Quota(resources=whole), members=["sim"])]
    org_total, team_total = sum(ORGS.values()), sum(TEAMS.values())
    for org, org_weight in ORGS.items():
        org_quota = _scaled(whole, guaranteed * org_weight / org_total)
        found.append(
            Entitlement(
                name=org,
                parent="region",
                weight=org_weight,
                quota=Quota(resources=org_quota),
                borrowing_limit=unlimited,
                members=["sim"],
            )
        )
        for team, weight in TEAMS.items():
            found.append(
                Entitlement(
                    name=entitlement_name(f"{org}/{team}"),
                    parent=org,
                    weight=weight,
                    quota=Quota(resources=_scaled(org_quota, guaranteed * weight / team_total)),
                    borrowing_limit=unlimited,
                    members=["sim"],
                )
            )
    return found


def _scaled(resources: Resources, fraction: float) -> Resources:
    """`resources` times `fraction`, in whole GPUs (and the CPU and memory that go with them)."""
    gpus = int(resources.gpus * fraction)
    return TASK * gpus


def machines(count: int) -> list[Machine]:
    """`count` GPU machines, four to a rack, eight racks to an MSB."""
    return [
        Machine(
            id=f"m{i:04d}",
            hostname=f"m{i:04d}.sim",
            topology=Topology(region="sim", dc="dc1", msb=f"msb{i // 32}", rack=f"r{i // 4}"),
            hardware_type="gpu8",
            capacity=MACHINE,
        )
        for i in range(count)
    ]


@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float
    team: str
    job: Job
    duration_s: float
    """Its run time on the GPUs it asks for."""
    deadline_s: float | None
    """Seconds after EPOCH; None: no deadline."""


def arrivals(
    machines_count: int,
    *,
    load: float,
    horizon_s: float,
    deadline_share: float,
    bursts: int,
    seed: int,
) -> list[Arrival]:
    """Poisson arrivals for every team at `load` times its weighted share of the region, a
    share of them with deadlines, plus `bursts` bursts of high-priority jobs, each at one team."""
    rng = np.random.default_rng(seed)
    capacity_gpus = machines_count * GPUS_PER_MACHINE
    found: list[Arrival] = []
    for team, share in targets().items():
        rate = load * share * capacity_gpus / mean_gpu_seconds()
        at = 0.0
        while (at := at + rng.exponential(1 / rate)) < horizon_s:
            found.append(_arrival(rng, team, at, len(found), deadline_share, NORMAL_PRIORITY))
    teams = team_names()
    for burst in range(bursts):
        team = teams[burst % len(teams)]
        start = horizon_s * (burst + 1) / (bursts + 1)
        for _ in range(int(rng.integers(4, 9))):
            at = start + rng.uniform(0, 600)
            found.append(_arrival(rng, team, at, len(found), 0.0, HIGH_PRIORITY))
    found.sort(key=lambda arrival: arrival.at_s)
    return found


def _arrival(
    rng: np.random.Generator,
    team: str,
    at: float,
    number: int,
    deadline_share: float,
    priority: int,
) -> Arrival:
    scale = int(rng.choice(SCALES, p=SCALE_WEIGHTS))
    low, high = SHORT_U if rng.random() < SHORT_SHARE else LONG_U
    duration = 60 * 10 ** rng.uniform(low, high)
    deadline = None
    if rng.random() < deadline_share:
        deadline = at + duration * rng.uniform(1.5, 4.0)
    submitted = EPOCH + timedelta(seconds=at)
    spec = JobSpec(
        name=f"j{number:06d}",
        entitlement=entitlement_name(team),
        count=scale,
        kind=JobKind.BATCH,
        priority=priority,
        task=TaskTemplate(package="train", version="1", command="train", resources=TASK),
        placement=Placement(gang=True, spread=Spread(level=FaultDomain.MSB, max_skew=8)),
        deadline=None if deadline is None else EPOCH + timedelta(seconds=deadline),
        expected_duration_s=duration,
    )
    job = Job(spec=spec, generation=1, created_at=submitted, updated_at=submitted)
    return Arrival(at, team, job, duration, deadline)
