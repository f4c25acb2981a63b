"""Seeded random regions and job streams for the placement golden file, and their recording.

Each seed builds a region (machines of every state, hardware type, host profile and attribute,
some owned with tasks, some with unreadable records) and places a stream of jobs on it, one
after the other, through the allocator's own planner: every constraint operator, preference,
spread level and skew, datacenter and hardware limit, affinity kind, gang, machine and resource
quota. Some jobs are placed again with earlier tasks held, some after a lost commit race (a
kept choice merged). Every choice and the `explain` that follows it is recorded.

Regenerate the golden file (only when a behaviour change is intended, and say so):
    .venv/bin/python -m tests.support.placement_golden --write
"""

from __future__ import annotations

import argparse
import gzip
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from tests.support.allocator_builders import BIG, Region, allocation, entitlement, job, machine
from tether.allocator.explain import Explanation
from tether.allocator.placement import Choice
from tether.model import (
    Affinity,
    Constraint,
    ConstraintOp,
    Entitlement,
    FaultDomain,
    Job,
    MachineState,
    Placement,
    Preference,
    Resources,
    Spread,
)

GOLDEN = Path(__file__).parent / "data" / "placement_golden.jsonl.gz"
SEEDS = range(10)
"""Seeds 0-7 are small regions with long streams; 8 and 9 big entitlements (planned on a sample)."""

_DCS = ("dc1", "dc2", "dc3")
_HARDWARE = ("std", "std", "std", "mem", "gpu")
_PROFILES = (None, None, None, "fast", "big")
_STATES = [MachineState.UP] * 12 + [s for s in MachineState if s is not MachineState.UP]
Record = dict[str, Any]


def _predicate(rng: random.Random) -> dict[str, Any]:
    attribute = rng.choice(("zone", "gen", "kernel", "missing"))
    op = rng.choice(list(ConstraintOp))
    if op in (ConstraintOp.GE, ConstraintOp.LE):
        return {"attribute": "gen", "op": op, "value": str(rng.randint(1, 5))}
    if op is ConstraintOp.EXISTS:
        return {"attribute": attribute, "op": op}
    choices = {"zone": "abcd", "gen": "12345x", "kernel": "56", "missing": "ab"}[attribute]
    if op in (ConstraintOp.IN, ConstraintOp.NOT_IN):
        return {"attribute": attribute, "op": op, "values": rng.sample(choices, rng.randint(1, 2))}
    return {"attribute": attribute, "op": op, "value": rng.choice(choices)}


def _region(rng: random.Random, seed: int) -> tuple[Region, list[Entitlement]]:
    big = seed >= 8
    count = rng.randint(3000, 3600) if big else rng.randint(120, 400)
    names = ["ads", "ml", "web", "batch"]
    entitlements = [
        entitlement(
            name,
            cpu=rng.choice((BIG, BIG, 400_000, 60_000)),
            memory=rng.choice((BIG, BIG, 800_000, 100_000)),
            gpus=rng.choice((BIG, 8)),
            extra={"fpga": rng.choice((BIG, 4))},
            machines=rng.choice(({}, {}, {"std": 40, "mem": 10}, {"gpu": 6}, {"std": 8})),
            allowed_dcs=rng.choice(([], [], ["dc1", "dc2"], ["dc3"])),
            host_profile=rng.choice(_PROFILES),
        )
        for name in names
    ]
    if big:
        # One entitlement owns most of the region: its plans run on a sample of its machines.
        entitlements[0] = entitlement("ads")
    region = Region().entitle(*entitlements)
    for n in range(count):
        attributes = {
            key: value
            for key, value in (
                ("zone", rng.choice("abc")),
                ("gen", rng.choice(("1", "2", "3", "4", "5", "x"))),
                ("kernel", rng.choice("56")),
            )
            if rng.random() < 0.85
        }
        dc = rng.choice(_DCS)
        msb = f"{dc}-msb{rng.randint(1, 4)}"
        region.add(
            machine(
                f"m{n:05d}",
                dc=dc,
                msb=msb,
                rack=f"{msb}-r{rng.randint(1, 6)}",
                hardware=rng.choice(_HARDWARE),
                state=rng.choice(_STATES),
                cpu=rng.choice((4000, 8000, 16000)),
                memory=rng.choice((8192, 16384, 65536)),
                disk=rng.choice((0, 100)),
                gpus=rng.choice((0, 0, 0, 2, 4)),
                extra={"fpga": rng.choice((0, 0, 1, 2))},
                attributes=attributes,
                profile=rng.choice(_PROFILES),
            )
        )
        roll = rng.random()
        if roll < 0.03:
            region.put_record(f"m{n:05d}", b"{")
        elif roll < (0.85 if big else 0.35):
            owner = "ads" if big else rng.choice(names)
            used = Resources(cpu=rng.choice((0, 1000, 3000)), memory_mib=rng.choice((0, 2048)))
            tasks = [(f"{owner}/old{n}", 0, used)] if used.cpu or used.memory_mib else []
            region.put_record(f"m{n:05d}", allocation(f"m{n:05d}", *tasks, owner=owner))
    return region, entitlements


def _job(rng: random.Random, n: int, owners: list[Entitlement], earlier: list[Job]) -> Job:
    constraints = [
        Constraint.model_validate(_predicate(rng)) for _ in range(rng.choice((0, 0, 1, 2)))
    ]
    preferences = [
        Preference.model_validate({**_predicate(rng), "weight": rng.randint(1, 5)})
        for _ in range(rng.choice((0, 1, 2, 3)))
    ]
    affinities = []
    if earlier and rng.random() < 0.2:
        affinities.append(
            Affinity(
                job=rng.choice(earlier).handle,
                level=rng.choice(("machine", "rack")),
                anti=rng.random() < 0.6,
            )
        )
    placement = Placement(
        constraints=constraints,
        preferences=preferences,
        hardware_types=rng.choice(([], [], [], ["std"], ["gpu"], ["std", "mem"])),
        datacenters=rng.choice(([], [], [], ["dc1"], ["dc2", "dc3"])),
        spread=Spread(level=rng.choice(list(FaultDomain)), max_skew=rng.choice((1, 1, 2, 3))),
        affinities=affinities,
        gang=rng.random() < 0.15,
    )
    gpus = rng.random() < 0.1
    return job(
        f"j{n:04d}",
        entitlement=rng.choice(owners).name,
        count=rng.choice((1, 2, 3, 5, 8, 13, 40)),
        cpu=rng.choice((0, 250, 500, 1000, 2000)),
        memory=rng.choice((0, 256, 1024, 4096)),
        disk=rng.choice((0, 0, 10)),
        gpus=1 if gpus else 0,
        extra={"fpga": 1} if rng.random() < 0.05 else {},
        placement=placement,
    )


def _choice(region: Region, choice: Choice) -> Record:
    ids = region.index.ids
    return {
        "placements": {str(task): ids[row] for task, row in sorted(choice.placements.items())},
        "joined": sorted(ids[row] for row in choice.joined),
        "unplaced": {str(task): reason for task, reason in sorted(choice.unplaced.items())},
    }


def _explanation(explanation: Explanation) -> Record:
    return {
        "considered": explanation.considered,
        "fitting": explanation.fitting,
        "entitlement_machines": explanation.entitlement_machines,
        "outcomes": [[o.rule, o.reason, o.rejected, o.detail] for o in explanation.outcomes],
        "preferences": [[p.rule, p.weight, p.matching] for p in explanation.preferences],
        "chosen": [[c.machine, c.tasks, c.rank, c.preferences] for c in explanation.chosen],
        "summary": explanation.summary,
    }


def stream(seed: int) -> Iterator[Record]:
    """The records of one seed's region: one per choice, with the explanation after it."""
    rng = random.Random(seed)
    region, owners = _region(rng, seed)
    by_name = {owner.name: owner for owner in owners}
    # In the big regions most jobs are the big entitlement's, to be planned on a sample.
    choosers = [*owners, *[owners[0]] * 6] if seed >= 8 else owners
    placed: list[Job] = []
    for n in range(150 if seed >= 8 else 300):
        # A failure's reason is cached for 30 s by signature: each choice here is judged on
        # the region as it is, so that the file does not depend on how fast the stream runs.
        region.cache.reasons.clear()
        roll = rng.random()
        if placed and roll < 0.1:
            # Place the tasks an earlier job did not get, next to the ones it holds.
            again = rng.choice(placed)
            kind, choice = "again", region.choose(again, by_name[again.spec.entitlement])
            region.commit(again, by_name[again.spec.entitlement], choice)
            placing = again
        else:
            placing = _job(rng, n, choosers, placed)
            owner = by_name[placing.spec.entitlement]
            if roll < 0.2:
                # A lost commit race: another job commits between the choice and the merge.
                kind, first = "merge", region.choose(placing, owner)
                interloper = _job(rng, 10_000 + n, owners, placed)
                region.place(interloper, by_name[interloper.spec.entitlement])
                region.cache.reasons.clear()
                choice = region.choose(placing, owner, keep=first.placements)
            else:
                kind, choice = "place", region.choose(placing, owner)
            region.commit(placing, owner, choice)
            placed.append(placing)
        yield {
            "seed": seed,
            "kind": kind,
            "job": placing.handle,
            **_choice(region, choice),
            "explain": _explanation(region.explain(placing, by_name[placing.spec.entitlement])),
        }


def record_all() -> list[Record]:
    return [record for seed in SEEDS for record in stream(seed)]


def read_golden() -> list[Record]:
    with gzip.open(GOLDEN, "rb") as file:
        return [orjson.loads(line) for line in file]


def write_golden(records: list[Record]) -> None:
    GOLDEN.parent.mkdir(exist_ok=True)
    # mtime=0: the same records give the same bytes.
    with gzip.GzipFile(GOLDEN, "wb", mtime=0) as file:
        file.writelines(orjson.dumps(record) + b"\n" for record in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the golden file anew")
    args = parser.parse_args()
    records = record_all()
    if args.write:
        write_golden(records)
    placed = sum(len(r["placements"]) for r in records)
    print(
        f"{len(records)} choices, {placed} tasks placed"
        + (f", written to {GOLDEN}" if args.write else "")
    )


if __name__ == "__main__":
    main()
