"""A Twine-like job stream: heavy-tailed task counts, a few task shapes, varied placement."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from allocbench.region import GIB, GPU_TYPE, GPUS_PER_MACHINE, KERNELS, Region, write_puts
from tether.model import Job, from_json
from tether.store import Put, Store, keys

MEAN_TASKS: Final = 36
# Log-normal task counts: the median job has about 12 tasks, one in a thousand several hundred.
COUNT_SIGMA: Final = 1.5
MAX_TASKS: Final = 3_000
GANG_MAX_TASKS: Final = 100
GPU_MAX_TASKS: Final = 64
GPU_JOB_SHARE: Final = 0.4
"""Of the jobs of teams with GPUs, while GPU jobs ask for fewer GPUs than the stream's goal."""
# Jobs written ahead of the fill, relative to what reaching it takes: constrained jobs, full
# quotas and gang jobs leave tasks unplaced, so the stream must not run dry first.
STREAM_MARGIN: Final = 2.5
LARGE_ENTITLEMENT: Final = "bench-large"
LARGE_JOB_FILL: Final = 0.6
"""The fill at which the large job is placed alone (or the fill asked for, if lower)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """The resources of one task."""

    name: str
    cpu: int
    memory_mib: int
    disk_gib: int
    gpus: int

    def resources(self, count: int = 1) -> dict[str, Any]:
        return {
            "cpu": self.cpu * count,
            "memory_mib": self.memory_mib * count,
            "disk_gib": self.disk_gib * count,
            "gpus": self.gpus * count,
            "extra": {},
        }


# (shape, share of jobs): about 4 GiB per core on average, as the region's hardware offers.
SHAPES: Final = (
    (Shape("small", 500, 1 * GIB, 5, 0), 0.25),
    (Shape("web", 1_000, 2 * GIB, 10, 0), 0.30),
    (Shape("service", 2_000, 6 * GIB, 20, 0), 0.25),
    (Shape("big", 4_000, 16 * GIB, 40, 0), 0.10),
    (Shape("cache", 2_000, 16 * GIB, 10, 0), 0.10),
)
GPU_SHAPE: Final = Shape("gpu", 12_000, 128 * GIB, 100, 2)
LARGE_SHAPE: Final = Shape("large", 1_000, 2 * GIB, 5, 0)

# (placement kind, share of jobs); "default" is spread over MSBs with max skew 1.
POLICIES: Final = (
    ("default", 0.55),
    ("constraints", 0.12),
    ("preferences", 0.12),
    ("spread-rack", 0.07),
    ("spread-dc", 0.05),
    ("datacenters", 0.05),
    ("gang", 0.04),
)
CONSTRAINTS: Final[tuple[list[dict[str, Any]], ...]] = (
    [{"attribute": "ssd", "op": "==", "value": "true"}],
    [{"attribute": "kernel", "op": "in", "values": list(KERNELS[1:])}],
    [{"attribute": "generation", "op": ">=", "value": "6"}],
    [
        {"attribute": "rack_type", "op": "not_in", "values": ["storage", "legacy"]},
        {"attribute": "generation", "op": ">=", "value": "5"},
    ],
)
PREFERENCES: Final[tuple[list[dict[str, Any]], ...]] = (
    [
        {"attribute": "generation", "op": ">=", "value": "7", "weight": 4},
        {"attribute": "ssd", "op": "==", "value": "true", "weight": 2},
        {"attribute": "kernel", "op": "==", "value": KERNELS[-1], "weight": 1},
    ],
    [
        {"attribute": "rack_type", "op": "==", "value": "compute", "weight": 2},
        {"attribute": "kernel", "op": "exists", "weight": 1},
    ],
)


@dataclass(frozen=True, slots=True)
class JobPlan:
    """One job of the stream: enough to write its record and to count what it places."""

    entitlement: str
    name: str
    count: int
    shape: Shape
    policy: str
    datacenters: tuple[str, ...] = ()
    variant: int = 0

    @property
    def handle(self) -> str:
        return f"{self.entitlement}/{self.name}"


def job_stream(region: Region, fill: float, rng: random.Random) -> list[JobPlan]:
    """Jobs until they ask for STREAM_MARGIN times `fill` of the region's CPU and memory (and
    GPU jobs for no more than that of its GPUs)."""
    teams = region.teams
    weights = list(itertools.accumulate(team.share for team in teams))
    shapes, shape_weights = [s for s, _ in SHAPES], [w for _, w in SHAPES]
    policies, policy_weights = [p for p, _ in POLICIES], [w for _, w in POLICIES]
    max_tasks = min(MAX_TASKS, max(8, region.machines // 2))
    mu = math.log(MEAN_TASKS) - COUNT_SIGMA**2 / 2
    cpu_goal = region.cpu * fill * STREAM_MARGIN
    memory_goal = region.memory_mib * fill * STREAM_MARGIN
    gpu_goal = sum(r.size for r in region.racks if r.hardware.name == GPU_TYPE) * (
        GPUS_PER_MACHINE * fill * STREAM_MARGIN
    )
    region_dcs = sorted({rack.dc for rack in region.racks})
    cpu = memory = gpus = 0
    plans: list[JobPlan] = []
    while cpu < cpu_goal or memory < memory_goal:
        team = rng.choices(teams, cum_weights=weights)[0]
        count = min(max_tasks, max(1, round(rng.lognormvariate(mu, COUNT_SIGMA))))
        policy = rng.choices(policies, weights=policy_weights)[0]
        datacenters: tuple[str, ...] = ()
        if team.gpus and gpus < gpu_goal and rng.random() < GPU_JOB_SHARE:
            shape, policy, count = GPU_SHAPE, "gpu", min(count, GPU_MAX_TASKS)
        else:
            shape = rng.choices(shapes, weights=shape_weights)[0]
        if policy == "gang":
            count = min(count, GANG_MAX_TASKS)
        elif policy == "datacenters":
            allowed = team.record["allowed_dcs"] or region_dcs
            datacenters = tuple(sorted(rng.sample(allowed, min(2, len(allowed)))))
        plans.append(
            JobPlan(
                team.name, f"j{len(plans) + 1:07d}", count, shape, policy, datacenters, len(plans)
            )
        )
        cpu += count * shape.cpu
        memory += count * shape.memory_mib
        gpus += count * shape.gpus
    return plans


def large_job(count: int) -> JobPlan:
    return JobPlan(LARGE_ENTITLEMENT, "large-job", count, LARGE_SHAPE, "default")


def large_entitlement(count: int) -> dict[str, Any]:
    """The large job's entitlement: a quota of exactly that job, so other jobs cannot use it."""
    return {
        "name": LARGE_ENTITLEMENT,
        "parent": None,
        "quota": {"resources": LARGE_SHAPE.resources(count), "machines": {}},
        "host_profile": None,
        "allowed_dcs": [],
        "weight": 1,
        "members": [],
    }


def _placement(plan: JobPlan) -> dict[str, Any]:
    placement: dict[str, Any] = {}
    match plan.policy:
        case "gpu":
            placement["hardware_types"] = [GPU_TYPE]
        case "constraints":
            placement["constraints"] = CONSTRAINTS[plan.variant % len(CONSTRAINTS)]
        case "preferences":
            placement["preferences"] = PREFERENCES[plan.variant % len(PREFERENCES)]
        case "spread-rack":
            placement["spread"] = {"level": "rack", "max_skew": 2}
        case "spread-dc":
            placement["spread"] = {"level": "dc", "max_skew": 4}
        case "datacenters":
            placement["datacenters"] = list(plan.datacenters)
        case "gang":
            placement["gang"] = True
    return placement


def job_record(plan: JobPlan, now: str) -> bytes:
    """The stored `Job` of `plan` at generation 1, as JSON."""
    spec = {
        "name": plan.name,
        "entitlement": plan.entitlement,
        "count": plan.count,
        "task": {
            "package": f"bench-{plan.shape.name}",
            "version": "1.0.0",
            "command": "/usr/bin/true",
            "resources": plan.shape.resources(),
        },
        "placement": _placement(plan),
    }
    return json.dumps(
        {"spec": spec, "generation": 1, "created_at": now, "updated_at": now},
        separators=(",", ":"),
    ).encode()


async def write_jobs(store: Store, plans: list[JobPlan]) -> None:
    """Every job record of `plans`, in transactions, before any is placed."""
    now = datetime.now(UTC).isoformat()

    checked: set[str] = set()

    def puts() -> Iterator[Put]:
        for index, plan in enumerate(plans):
            value = job_record(plan, now)
            if index % 100 == 0 or plan.policy not in checked:
                # Built by hand for speed: check that the model accepts every kind of it.
                from_json(Job, value, stored=True)
                checked.add(plan.policy)
            yield Put(keys.job(plan.entitlement, plan.name), value)

    await write_puts(store, puts(), len(plans), "jobs")


def add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that choose the region and its job stream: --machines, --seed, --fill and
    --large-job, each checked as it is parsed."""
    parser.add_argument(
        "--machines",
        type=_at_least(1),
        default=1_000_000,
        help="machines in the region (1,000,000)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of region and jobs (1)")
    parser.add_argument(
        "--fill",
        type=_fraction,
        default=0.8,
        help="stop when the CPU or memory placed reaches this fraction of the region (0.8)",
    )
    parser.add_argument(
        "--large-job",
        type=_at_least(0),
        default=15_000,
        metavar="TASKS",
        help="tasks of the job placed alone at 60%% fill; 0 skips it (15,000)",
    )


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}")
        return value

    return parse


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError("must be in (0, 1]")
    return value
