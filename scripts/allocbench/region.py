"""A synthetic region, deterministic from a seed: topology, hardware mix, labels, entitlements."""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from benchkit import log

from tether.model import Allocation, Entitlement, HostProfile, Machine, from_json, to_json
from tether.store import Put, Store, keys

REGION: Final = "bench"
DATACENTERS: Final = 4
MSBS_PER_DC: Final = 24
RACK_SIZE: Final = 40
PUTS_PER_TXN: Final = 250
# Transactions in flight while writing: enough to keep etcd busy, few enough not to queue.
TXNS_IN_FLIGHT: Final = 8
GIB: Final = 1024

KERNELS: Final = ("5.15.0-91-generic", "6.1.0-18-amd64", "6.6.8-tether")
HOST_PROFILES: Final = ("hugepages-1g", "low-latency", "io-tuned")
MAX_TEAMS: Final = 40
# Smaller regions get fewer teams, so that a team still owns machines in most MSBs.
MACHINES_PER_TEAM: Final = 250
# Quotas add up to this share of the region: room for the fill plus constrained jobs that fail.
QUOTA_HEADROOM: Final = 0.97
# Of the racks, each host profile is carried by this many times its teams' share of the region,
# so that those teams find machines without a profile switch (the benchmark runs no agents).
PROFILE_RACK_FACTOR: Final = 1.6
# Machines that take no tasks, as in any real region.
DRAINING_SHARE: Final = 0.005
DOWN_SHARE: Final = 0.005


@dataclass(frozen=True, slots=True)
class HardwareType:
    """A machine model: its capacity, its share of racks, and the labels it carries."""

    name: str
    cpu: int
    memory_mib: int
    disk_gib: int
    gpus: int
    rack_share: float
    generations: tuple[int, ...]
    ssd: bool | None
    """None: some racks have SSDs, some not."""


HARDWARE: Final = (
    HardwareType("compute", 32_000, 64 * GIB, 960, 0, 0.45, (6, 7), True),
    HardwareType("memory", 32_000, 256 * GIB, 1_920, 0, 0.15, (6, 7), True),
    HardwareType("storage", 16_000, 64 * GIB, 8_000, 0, 0.15, (5, 6), False),
    HardwareType("gpu", 48_000, 512 * GIB, 3_840, 8, 0.05, (7,), True),
    HardwareType("legacy", 16_000, 32 * GIB, 480, 0, 0.20, (4, 5), None),
)
GPU_TYPE: Final = "gpu"
GPU_HARDWARE: Final = next(h for h in HARDWARE if h.name == GPU_TYPE)
GPUS_PER_MACHINE: Final = GPU_HARDWARE.gpus


@dataclass(frozen=True, slots=True)
class Rack:
    """A rack of one hardware type; its machines are numbered `first` to `first + size - 1`."""

    dc: str
    msb: str
    name: str
    first: int
    size: int
    hardware: HardwareType
    generation: int
    ssd: bool
    profile: str | None

    @property
    def msb_path(self) -> str:
        return f"{self.dc}/{self.msb}"


@dataclass(frozen=True, slots=True)
class Team:
    """An entitlement of the benchmark, and the share of the job stream it submits."""

    name: str
    share: float
    gpus: bool
    record: dict[str, Any]


@dataclass(slots=True)
class Region:
    """Everything the benchmark needs to know about the region without reading it back."""

    machines: int
    seed: int
    racks: list[Rack]
    teams: list[Team] = field(default_factory=list)
    cpu: int = 0
    memory_mib: int = 0
    msb_capacity: dict[str, tuple[int, int]] = field(default_factory=dict)
    """MSB path -> (cpu, memory) of its machines."""
    machines_by_type: dict[str, int] = field(default_factory=dict)

    @property
    def msbs(self) -> list[str]:
        return list(self.msb_capacity)


def machine_id(number: int, machines: int) -> str:
    return f"m{number:0{max(7, len(str(machines)))}d}"


def build_region(machines: int, seed: int) -> Region:
    """The racks (drawn per rack), the capacity they add up to, and the teams' entitlements."""
    rng = random.Random(seed)
    msbs = DATACENTERS * MSBS_PER_DC
    teams = min(MAX_TEAMS, max(4, machines // MACHINES_PER_TEAM))
    shares = _team_shares(teams, random.Random(seed + 1))
    profile_share = _profile_rack_shares(shares)
    racks: list[Rack] = []
    number = 1
    for m in range(msbs):
        dc, msb = f"dc{m // MSBS_PER_DC + 1}", f"msb{m % MSBS_PER_DC + 1:02d}"
        in_msb = machines // msbs + (1 if m < machines % msbs else 0)
        for r in range(math.ceil(in_msb / RACK_SIZE)):
            hardware = rng.choices(HARDWARE, weights=[h.rack_share for h in HARDWARE])[0]
            size = min(RACK_SIZE, in_msb - r * RACK_SIZE)
            profile = None
            if hardware.name != GPU_TYPE:
                draw = rng.random()
                for name, share in profile_share.items():
                    if draw < share:
                        profile = name
                        break
                    draw -= share
            ssd = hardware.ssd if hardware.ssd is not None else rng.random() < 0.5
            racks.append(
                Rack(
                    dc,
                    msb,
                    f"r{r + 1:03d}",
                    number,
                    size,
                    hardware,
                    rng.choice(hardware.generations),
                    ssd,
                    profile,
                )
            )
            number += size
    region = Region(machines, seed, racks)
    for rack in racks:
        cpu, memory = region.msb_capacity.get(rack.msb_path, (0, 0))
        region.msb_capacity[rack.msb_path] = (
            cpu + rack.size * rack.hardware.cpu,
            memory + rack.size * rack.hardware.memory_mib,
        )
        region.machines_by_type[rack.hardware.name] = (
            region.machines_by_type.get(rack.hardware.name, 0) + rack.size
        )
        region.cpu += rack.size * rack.hardware.cpu
        region.memory_mib += rack.size * rack.hardware.memory_mib
    region.teams = _teams(region, shares, random.Random(seed + 3))
    return region


def _team_roles(index: int, teams: int) -> tuple[bool, bool, str | None, bool]:
    """(gpus, allowed_dcs, host profile, machine quota) of team `index`: a fixed mix of kinds
    (of 40 teams: 4 with GPUs, then 6 limited to two datacenters, 6 with a host profile and 6
    with a machine quota, and 18 plain ones)."""
    position = (index + 0.5) / teams
    return (
        position < 0.1,
        0.1 <= position < 0.25,
        HOST_PROFILES[index % len(HOST_PROFILES)] if 0.25 <= position < 0.4 else None,
        0.4 <= position < 0.55,
    )


def _team_shares(teams: int, rng: random.Random) -> list[float]:
    weights = [rng.lognormvariate(0, 0.6) for _ in range(teams)]
    return [w / sum(weights) for w in weights]


def _profile_rack_shares(shares: list[float]) -> dict[str, float]:
    by_profile: dict[str, float] = {}
    for index, share in enumerate(shares):
        profile = _team_roles(index, len(shares))[2]
        if profile is not None:
            by_profile[profile] = by_profile.get(profile, 0.0) + share * PROFILE_RACK_FACTOR
    return by_profile


def _teams(region: Region, shares: list[float], rng: random.Random) -> list[Team]:
    gpu_machines = region.machines_by_type.get(GPU_TYPE, 0)
    gpu_total = gpu_machines * GPUS_PER_MACHINE
    disk_total = sum(rack.size * rack.hardware.disk_gib for rack in region.racks)
    gpu_share_total = sum(s for i, s in enumerate(shares) if _team_roles(i, len(shares))[0])
    dcs = [f"dc{d + 1}" for d in range(DATACENTERS)]
    teams = []
    for index, share in enumerate(shares):
        gpus, limited_dcs, profile, machine_quota = _team_roles(index, len(shares))
        # GPU tasks need much memory: teams with GPUs also get their part of the GPU machines.
        gpu_part = gpu_machines * share / gpu_share_total if gpus else 0
        name = f"team-{index + 1:02d}"
        quota: dict[str, Any] = {
            "resources": {
                "cpu": math.ceil(
                    (region.cpu * share + gpu_part * GPU_HARDWARE.cpu) * QUOTA_HEADROOM
                ),
                "memory_mib": math.ceil(
                    (region.memory_mib * share + gpu_part * GPU_HARDWARE.memory_mib)
                    * QUOTA_HEADROOM
                ),
                "disk_gib": math.ceil(disk_total * share * QUOTA_HEADROOM),
                "gpus": math.ceil(gpu_total * share / gpu_share_total) if gpus else 0,
                "extra": {},
            },
            "machines": {},
        }
        if machine_quota:
            # Machines of every type, enough for the share at a packing of about two thirds.
            quota["machines"] = {
                hardware: math.ceil(count * share * 1.5) + 2
                for hardware, count in sorted(region.machines_by_type.items())
            }
        record = {
            "name": name,
            "parent": None,
            "quota": quota,
            "host_profile": profile,
            "allowed_dcs": sorted(rng.sample(dcs, 2)) if limited_dcs else [],
            "weight": 1,
            "members": [f"{name}@bench.example"],
        }
        teams.append(Team(name, share, gpus, record))
    return teams


def _machines(region: Region) -> Iterator[tuple[str, dict[str, Any]]]:
    rng = random.Random(region.seed + 2)
    for rack in region.racks:
        hardware = rack.hardware
        kernels = KERNELS[1:] if rack.generation >= 6 else KERNELS[:2]
        for number in range(rack.first, rack.first + rack.size):
            draw = rng.random()
            state = "up"
            if draw < DOWN_SHARE:
                state = "down"
            elif draw < DOWN_SHARE + DRAINING_SHARE:
                state = "draining"
            identifier = machine_id(number, region.machines)
            yield (
                identifier,
                {
                    "id": identifier,
                    "hostname": f"{identifier}.{rack.dc}.{REGION}.example",
                    "topology": {
                        "region": REGION,
                        "dc": rack.dc,
                        "msb": rack.msb,
                        "rack": rack.name,
                    },
                    "hardware_type": hardware.name,
                    "capacity": {
                        "cpu": hardware.cpu,
                        "memory_mib": hardware.memory_mib,
                        "disk_gib": hardware.disk_gib,
                        "gpus": hardware.gpus,
                        "extra": {},
                    },
                    "attributes": {
                        "kernel": rng.choice(kernels),
                        "ssd": "true" if rack.ssd else "false",
                        "generation": str(rack.generation),
                        "rack_type": hardware.name,
                    },
                    "host_profile_current": rack.profile,
                    "state": state,
                    "down_since": None,
                    "harvest": None,
                },
            )


async def write_puts(store: Store, puts: Iterator[Put], total: int, what: str) -> None:
    """Writes `puts` in transactions of PUTS_PER_TXN, TXNS_IN_FLIGHT at a time, with progress."""
    in_flight: set[asyncio.Task[object]] = set()
    written = 0
    next_report = 0.0
    batch: list[Put] = []

    async def flush() -> None:
        nonlocal written, next_report
        if len(in_flight) >= TXNS_IN_FLIGHT:
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                in_flight.discard(task)
                task.result()
        in_flight.add(asyncio.create_task(store.txn((), list(batch))))
        written += len(batch)
        batch.clear()
        if written / total >= next_report:
            log(f"writing {what}: {written:,}/{total:,}")
            next_report += 0.1

    for put in puts:
        batch.append(put)
        if len(batch) == PUTS_PER_TXN:
            await flush()
    if batch:
        await flush()
    for task in in_flight:
        await task


async def write_region(store: Store, region: Region, extra: list[dict[str, Any]]) -> None:
    """Host profiles, the teams' and `extra` entitlements, then every machine with an empty
    allocation record."""
    if await store.count(keys.MACHINES):
        raise SystemExit("the store already holds machines: give the benchmark an empty store")
    await store.txn((), entitlement_puts(region, extra))
    await write_puts(store, machine_puts(region), 2 * region.machines, "machines and allocations")


def entitlement_puts(region: Region, extra: list[dict[str, Any]]) -> list[Put]:
    """The region's host profiles, and the teams' and `extra` entitlements."""
    records = [Put(keys.host_profile(name), to_json(_host_profile(name))) for name in HOST_PROFILES]
    for record in [team.record for team in region.teams] + extra:
        entitlement = json.dumps(record).encode()
        from_json(Entitlement, entitlement, stored=True)
        records.append(Put(keys.entitlement(record["name"]), entitlement))
    return records


def machine_puts(region: Region) -> Iterator[Put]:
    """Every machine, each followed by its empty allocation record."""
    for index, (identifier, machine) in enumerate(_machines(region)):
        value = json.dumps(machine, separators=(",", ":")).encode()
        if index % PUTS_PER_TXN == 0:
            # Built by hand for speed: check that it is what the model itself would write.
            assert to_json(from_json(Machine, value, stored=True)) == value, value
        yield Put(keys.machine(identifier), value)
        yield Put(keys.allocation(identifier), to_json(Allocation(machine=identifier)))


def _host_profile(name: str) -> HostProfile:
    return HostProfile(
        name=name,
        description=f"benchmark profile {name}",
        settings={"sysctl.vm.nr_hugepages": "64"} if name == "hugepages-1g" else {"tuned": name},
        switch_seconds=5.0,
    )
