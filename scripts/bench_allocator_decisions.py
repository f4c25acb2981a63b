#!/usr/bin/env python3
"""The allocator's decision rate at region scale: how many jobs one replica plans a second.

Builds `bench_allocator`'s synthetic region and job stream (same generator, same --seed: 4
datacenters of 24 MSBs, 40 teams, a Twine-like stream with constraints, preferences, spread and
gangs) and feeds the region's records to an allocator index in memory, through the index's own
feed sinks, as a replica's listing of the store does: no store, no process but this one. Then one
job at a time, until the CPU or memory placed reaches --fill (the --large-job job placed alone at
60%), it makes each Place's decision the way a replica does before it commits: parses the job's
record, runs the allocator's Planner (filters, scores, spread, gang) over the index and the
choice cache, and shows the choice in the index (`place_tentatively`), so that later jobs see
those machines as taken. Nothing is committed: `bench_allocator` measures the whole Place, store
included; this is the ceiling the replica's own CPU sets on it.

Prints one JSON line on stdout (progress on stderr):
  machines, build_s (the index built from the records, which are made in memory first),
  rss_mib (peak RSS of this process: records, index and job stream), jobs (decisions made),
  jobs_fully_placed, tasks_placed, fill and fill_stalled (as in bench_allocator),
  decisions_per_s (jobs over the fill's wall time), p50_ms and p99_ms (one decision),
  large_job_tasks and large_job_s, unplaced_tasks and unplaced_reasons (top 3).

Usage: .venv/bin/python scripts/bench_allocator_decisions.py [--machines 1000000] [--fill 0.8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from typing import Any

import numpy as np
from allocbench.decide import Decider, build_index, region_records
from allocbench.fill import Filler, Share, fill_share, no_one_else
from allocbench.jobs import (
    LARGE_JOB_FILL,
    add_stream_arguments,
    job_stream,
    large_entitlement,
    large_job,
)
from allocbench.region import build_region
from benchkit import log, stop_on_signals


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_stream_arguments(parser)
    return parser.parse_args()


async def decide(args: argparse.Namespace) -> dict[str, Any]:
    region = build_region(args.machines, args.seed)
    plans = job_stream(region, args.fill, random.Random(args.seed + 4))
    large = large_job(args.large_job) if args.large_job else None
    log(
        f"region: {args.machines:,} machines in {len(region.racks):,} racks, "
        f"{len(region.teams)} teams; {len(plans):,} jobs of {sum(p.count for p in plans):,} tasks"
    )
    records = region_records(region, [] if large is None else [large_entitlement(large.count)])
    log(f"{len(records):,} records made")
    started = time.perf_counter()
    index, cache = build_index(records)
    build_s = time.perf_counter() - started
    del records
    log(f"index built in {build_s:.1f} s")
    decider = Decider(index, cache, [*plans, *([] if large is None else [large])])
    share = Share(
        store_url="",
        worker=0,
        jobs=plans,
        cpu=region.cpu,
        memory_mib=region.memory_mib,
        fill=args.fill,
        large_fill=min(LARGE_JOB_FILL, args.fill),
        large=large,
        concurrency=1,
    )
    result = await fill_share(Filler(decider.place, share), no_one_else)
    calls, fill_s = result["calls"], result["fill_s"]
    latencies = np.array(result["latencies_ms"], dtype=np.float64)
    unplaced = Counter[str](result["unplaced"])
    return {
        "benchmark": "allocator-decisions",
        "machines": args.machines,
        "seed": args.seed,
        "build_s": round(build_s, 2),
        "rss_mib": round(result["rss_mib"]),
        "jobs": calls,
        "jobs_fully_placed": result["complete"],
        "tasks_placed": result["tasks_placed"] + result["large_job_tasks"],
        "fill": round(max(result["cpu"] / region.cpu, result["memory_mib"] / region.memory_mib), 4),
        "fill_stalled": result["stalled"],
        "decisions_per_s": round(calls / fill_s, 1) if fill_s else None,
        "p50_ms": round(float(np.percentile(latencies, 50)), 3) if calls else None,
        "p99_ms": round(float(np.percentile(latencies, 99)), 3) if calls else None,
        "large_job_tasks": result["large_job_tasks"],
        "large_job_s": round(result["large_job_s"], 3),
        "unplaced_tasks": sum(unplaced.values()),
        "unplaced_reasons": [
            {"reason": reason, "tasks": tasks} for reason, tasks in unplaced.most_common(3)
        ],
    }


def main() -> None:
    stop_on_signals()
    args = parse_args()
    result = asyncio.run(decide(args))
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
