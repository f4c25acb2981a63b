#!/usr/bin/env python3
"""The allocator at region scale: fill a synthetic region to 80% and check it from the store.

Builds a synthetic region in the store (deterministic from --seed): 4 datacenters of 24 MSBs,
racks of 40 machines of one hardware type each (compute 45%, memory-heavy 15%, storage 15%,
GPU 5%, legacy 20% of racks), labels kernel, ssd, generation and rack_type, about 1% of the
machines draining or down, some racks already carrying a host profile. 40 team entitlements
have resource quotas adding up to 97% of the region; some may use only two datacenters, some
carry a host profile, some also have a quota of machines per hardware type. Every machine gets
an empty allocation record.

Then writes a Twine-like job stream (not timed): log-normal task counts with a mean of 36 (median
about 12, a tail to 3,000), five task shapes plus GPU jobs bound to GPU machines, and placement
policies: spread over MSBs with max skew 1 (most jobs), attribute constraints (==, in, not_in,
>=), ordered preferences, spread over racks or datacenters with a larger skew, datacenter
restrictions, and small gang jobs.

Each allocator (tether.allocator.service.Allocator) builds its index from the store (build_s),
then keeps --concurrency Place calls in flight on its share of the jobs until the CPU or memory
it placed reaches --fill of its share of the region. At 60% fill every allocator pauses and one
places the --large-job job (spread over MSBs) alone. With --allocators N > 1 the allocators are
separate processes racing on the same store and free pool; each gets the jobs of the
entitlements whose home replica it is, as the scheduler routes them. Finally the store itself
is read back, page by page, to check that no machine holds more than its capacity, no
entitlement more than its quota, and no task sits on two machines; and --plot shows the free
CPU and memory per MSB before and after.

Prints one JSON line on stdout (progress goes to stderr):
  machines, allocators, jobs (Place calls of the stream; jobs_fully_placed of them placed
  every task), tasks_placed (all, large job included), fill (the higher of the CPU and memory
  fraction placed) and fill_reached,
  jobs_left (jobs of the stream never placed: 0 means the stream ran dry before the fill),
  fill_stalled (an allocator stopped because 10,000 calls raised its fill by under 0.2%: the
  free pool and quotas were used up);
  build_s (index build from the store, slowest allocator), rss_mib (peak RSS of the allocator
  process, VmHWM, the largest over workers; with one allocator that process also generated the
  job stream); job_allocs_per_s and task_placements_per_s (regular jobs over the fill's wall
  time), p50_ms and p99_ms (latency of one job's Place call), large_job_tasks (tasks of the
  large job actually placed) and large_job_s; conflict_rate (Place attempts whose machines or
  quota another allocator had changed, over all attempts), txn_conflict_rate (failed commit
  transactions over all: one conflict fails the whole group commit it is in), cache_hit_ratio;
  unplaced_tasks and unplaced_reasons (top 3); and from the store: overcommitted_machines,
  quota_violations, tasks_held_twice, store_tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import queue
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from allocbench.audit import Audit, audit
from allocbench.fill import Share, run_single, worker_main
from allocbench.jobs import (
    LARGE_JOB_FILL,
    JobPlan,
    add_stream_arguments,
    job_stream,
    large_entitlement,
    large_job,
    write_jobs,
)
from allocbench.plot import plot_free
from allocbench.region import Region, build_region, write_region
from benchkit import default_plot, log, stop_on_signals

from tether.scheduler.allocator_client import replica_order
from tether.store import open_store
from tether.store.etcd_server import EtcdServer

# A worker that neither reports nor exits within this long after the others is given up on.
WORKER_GRACE_S = 60.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_stream_arguments(parser)
    parser.add_argument(
        "--allocators",
        type=int,
        default=1,
        help="allocators racing on the store; 1 runs in this process, more as worker processes "
        "(default 1)",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        help="an existing, empty store (e.g. etcd://127.0.0.1:2379); default: a private etcd "
        "in a temporary directory, data on disk, removed at the end",
    )
    parser.add_argument(
        "--concurrency", type=int, default=8, help="Place calls in flight per allocator (8)"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=default_plot("bench_allocator.png"),
        help="where to write the free-capacity-per-MSB plot (default: bench-results/, which "
        "git ignores)",
    )
    args = parser.parse_args()
    if args.allocators < 1 or args.concurrency < 1:
        parser.error("--allocators and --concurrency must be positive")
    return args


async def prepare(url: str, region: Region, plans: list[JobPlan], large: JobPlan | None) -> None:
    async with open_store(url) as store:
        if large is None:
            await write_region(store, region, [])
            await write_jobs(store, plans)
        else:
            await write_region(store, region, [large_entitlement(large.count)])
            await write_jobs(store, [*plans, large])


async def read_back(url: str) -> Audit:
    async with open_store(url) as store:
        return await audit(store)


def run_workers(shares: list[Share]) -> list[dict[str, Any]]:
    """One spawned process per share; their statistics in worker order."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(shares))
    results: multiprocessing.Queue[dict[str, Any]] = context.Queue()
    workers = [
        context.Process(
            target=worker_main, args=(share, barrier, results), name=f"bench-{share.worker}"
        )
        for share in shares
    ]
    received: dict[int, dict[str, Any]] = {}
    try:
        for worker in workers:
            worker.start()
        all_exited_at: float | None = None
        while len(received) < len(workers):
            try:
                result = results.get(timeout=1)
            except queue.Empty:
                if all(not worker.is_alive() for worker in workers):
                    all_exited_at = all_exited_at or time.monotonic()
                    if time.monotonic() - all_exited_at > WORKER_GRACE_S / 10:
                        break
                continue
            received[result["worker"]] = result
        for worker in workers:
            worker.join(WORKER_GRACE_S)
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
    failed = [r["error"] for r in received.values() if "error" in r]
    missing = [share.worker for share in shares if share.worker not in received]
    if failed or missing:
        raise SystemExit(f"allocator workers failed: {failed}; no result from {missing}")
    return [received[share.worker] for share in shares]


def _shares(
    args: argparse.Namespace, url: str, region: Region, plans: list[JobPlan], large: JobPlan | None
) -> list[Share]:
    """Each allocator's jobs, as the scheduler routes them (to the entitlement's home replica),
    and its part of the region's capacity: its jobs' part of the stream's demand."""
    workers = [f"bench-{worker}" for worker in range(args.allocators)]
    jobs: dict[str, list[JobPlan]] = {worker: [] for worker in workers}
    for plan in plans:
        jobs[replica_order(plan.entitlement, workers)[0]].append(plan)
    cpu = sum(plan.count * plan.shape.cpu for plan in plans) or 1
    memory = sum(plan.count * plan.shape.memory_mib for plan in plans) or 1
    return [
        Share(
            store_url=url,
            worker=number,
            jobs=jobs[worker],
            cpu=region.cpu * sum(p.count * p.shape.cpu for p in jobs[worker]) / cpu,
            memory_mib=region.memory_mib
            * sum(p.count * p.shape.memory_mib for p in jobs[worker])
            / memory,
            fill=args.fill,
            large_fill=min(LARGE_JOB_FILL, args.fill),
            large=large if number == 0 else None,
            concurrency=args.concurrency,
        )
        for number, worker in enumerate(workers)
    ]


def summary(
    args: argparse.Namespace,
    region: Region,
    plans: list[JobPlan],
    results: list[dict[str, Any]],
    found: Audit,
) -> dict[str, Any]:
    fill_s = max(r["fill_s"] for r in results)
    calls = sum(r["calls"] for r in results)
    regular_tasks = sum(r["tasks_placed"] for r in results)
    large_tasks = sum(r["large_job_tasks"] for r in results)
    latencies = np.array([ms for r in results for ms in r["latencies_ms"]], dtype=np.float64)
    attempts = sum(r["attempts"] for r in results)
    hits = sum(r["cache_hits"] for r in results)
    lookups = hits + sum(r["cache_misses"] for r in results)
    unplaced: Counter[str] = Counter()
    for r in results:
        unplaced.update(r["unplaced"])
    fill_cpu = sum(r["cpu"] for r in results) / region.cpu
    fill_memory = sum(r["memory_mib"] for r in results) / region.memory_mib
    return {
        "benchmark": "allocator",
        "machines": args.machines,
        "allocators": args.allocators,
        "store": args.store or "etcd (private, on disk)",
        "seed": args.seed,
        "concurrency": args.concurrency,
        "build_s": round(max(r["build_s"] for r in results), 2),
        "rss_mib": round(max(r["rss_mib"] for r in results)),
        "jobs": calls,
        "jobs_fully_placed": sum(r["complete"] for r in results),
        "jobs_written": len(plans),
        "jobs_left": sum(r["jobs_left"] for r in results),
        "mean_tasks_per_job": round(sum(p.count for p in plans) / max(len(plans), 1), 1),
        "tasks_placed": regular_tasks + large_tasks,
        "fill": round(max(fill_cpu, fill_memory), 4),
        "fill_cpu": round(fill_cpu, 4),
        "fill_memory": round(fill_memory, 4),
        "fill_reached": max(fill_cpu, fill_memory) >= args.fill,
        "fill_stalled": any(r["stalled"] for r in results),
        "fill_s": round(fill_s, 2),
        "job_allocs_per_s": round(calls / fill_s, 1) if fill_s else None,
        "task_placements_per_s": round(regular_tasks / fill_s) if fill_s else None,
        "p50_ms": round(float(np.percentile(latencies, 50)), 2) if calls else None,
        "p99_ms": round(float(np.percentile(latencies, 99)), 2) if calls else None,
        "large_job_tasks": large_tasks,
        "large_job_s": round(max(r["large_job_s"] for r in results), 3),
        "conflict_rate": round(sum(r["conflicts"] for r in results) / attempts, 4)
        if attempts
        else 0.0,
        "txn_conflict_rate": round(
            sum(r["failed_transactions"] for r in results)
            / max(sum(r["transactions"] for r in results), 1),
            4,
        ),
        "cache_hit_ratio": round(hits / lookups, 4) if lookups else None,
        "unplaced_tasks": sum(unplaced.values()),
        "unplaced_reasons": [
            {"reason": reason, "tasks": tasks} for reason, tasks in unplaced.most_common(3)
        ],
        "place_errors": sum(sum(r["errors"].values()) for r in results),
        "overcommitted_machines": found.overcommitted_machines,
        "quota_violations": len(found.quota_violations),
        "quota_violation_examples": found.quota_violations[:5],
        "tasks_held_twice": found.tasks_held_twice,
        "store_tasks": found.tasks,
        "owned_machines": found.owned_machines,
        "plot": str(args.plot),
    }


def main() -> None:
    stop_on_signals()
    args = parse_args()
    started = time.monotonic()
    region = build_region(args.machines, args.seed)
    plans = job_stream(region, args.fill, random.Random(args.seed + 4))
    large = large_job(args.large_job) if args.large_job else None
    log(
        f"region: {args.machines:,} machines in {len(region.racks):,} racks, "
        f"{len(region.teams)} teams; {len(plans):,} jobs of {sum(p.count for p in plans):,} tasks"
    )
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        server: EtcdServer | None = None
        url = args.store
        if url is None:
            server = EtcdServer(Path(tmp) / "etcd")
            server.start()
            url = server.url
        try:
            asyncio.run(prepare(url, region, plans, large))
            log(f"region and jobs written in {time.monotonic() - started:.0f} s")
            shares = _shares(args, url, region, plans, large)
            if args.allocators == 1:
                results = [asyncio.run(run_single(shares[0]))]
            else:
                results = run_workers(shares)
            log("reading the store back to check it")
            found = asyncio.run(read_back(url))
        finally:
            if server is not None:
                server.cleanup()
    before = {msb: (1.0, 1.0) for msb in region.msbs}  # every allocation record written empty
    plot_free(
        args.plot,
        before,
        found.msb_free,
        f"free capacity per MSB: {args.machines:,} machines, {args.allocators} allocator(s)",
    )
    print(json.dumps(summary(args, region, plans, results, found)))
    sys.stdout.flush()
    log(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
