#!/usr/bin/env python3
"""What followers of the event stream cost a frontend: a default region (`tether up`: 4 agents,
2 shards, one frontend) with no job, and --followers clients of `GET /v1/events` (SSE, as the
admin, following everything) held open by this process.

Measures the frontend's CPU, from /proc, over --seconds without followers and over --seconds
with them idle (the region's own leases and reports are all that changes), and then how long
one event takes to reach every follower: a job submitted --jobs times, a second apart, from the
write until each follower has read its `job.submitted`.

Prints one JSON line on stdout (progress on stderr): `benchmark`, `store`, `followers`,
`seconds`, `frontend_cores_alone`, `frontend_cores_followed`, `followers_core_share` (the
difference: what the followers cost, in cores), `delivery_p50_ms`, `delivery_p99_ms`.

Usage: .venv/bin/python scripts/bench_events.py [--store sqlite|etcd] [--followers 100]
       [--seconds 60] [--jobs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from benchkit import log, stop_on_signals

# The region harness is test tooling (tests/support), shared with the end-to-end tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.harness import LocalRegion, cpu_seconds
from tether.model import DEFAULT_FENCING_S
from tether.sdk.events import SseParser

JOB = {
    "entitlement": "default",
    "count": 1,
    "kind": "batch",
    "suspended": True,
    "task": {
        "package": "bench",
        "version": "1",
        "command": "/bin/true",
        "resources": {"cpu": 100, "memory_mib": 64},
    },
}
"""Submitted suspended: its submission is the event timed, and nothing runs."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=("sqlite", "etcd"), default="sqlite")
    parser.add_argument("--followers", type=int, default=100, help="open streams (100)")
    parser.add_argument("--seconds", type=float, default=60.0, help="each CPU window (60)")
    parser.add_argument("--jobs", type=int, default=10, help="events timed to every follower")
    parser.add_argument("--settle-s", type=float, default=10.0, help="wait once ready (10)")
    args = parser.parse_args()
    if args.followers < 1 or args.seconds <= 0 or args.jobs < 1 or args.settle_s < 0:
        parser.error("--followers and --jobs at least 1, --seconds positive, --settle-s >= 0")
    return args


class Follower:
    """One open stream, and when it read each job's submission."""

    def __init__(self) -> None:
        self.submitted: dict[str, float] = {}
        self.arrived: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.open = asyncio.Event()

    async def follow(self, client: httpx.AsyncClient) -> None:
        async with client.stream("GET", "/v1/events", params={"kind": "job.submitted"}) as answer:
            answer.raise_for_status()
            self.open.set()
            parser = SseParser()
            async for line in answer.aiter_lines():
                message = parser.feed(line)
                if message is not None:
                    job = json.loads(message.data)["job"]
                    self.submitted[job] = time.monotonic()
                    self.arrived[job].set()


def frontend_cores(pid: int, seconds: float) -> float:
    before, started = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / (time.monotonic() - started)


async def followed(region: LocalRegion, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=args.followers + 10)
    headers = {"Authorization": f"Bearer {region.token}"}
    timeout = httpx.Timeout(10, read=None)
    async with httpx.AsyncClient(
        base_url=region.url, headers=headers, limits=limits, timeout=timeout
    ) as client:
        followers = [Follower() for _ in range(args.followers)]
        following = [asyncio.create_task(f.follow(client)) for f in followers]
        try:
            cores, delays = await _with_followers(client, followers, pid, args)
        finally:
            for task in following:
                task.cancel()
            await asyncio.gather(*following, return_exceptions=True)
    latencies = np.array(delays) * 1000
    return {
        "frontend_cores_followed": round(cores, 4),
        "delivery_p50_ms": round(float(np.percentile(latencies, 50)), 1),
        "delivery_p99_ms": round(float(np.percentile(latencies, 99)), 1),
    }


async def _with_followers(
    client: httpx.AsyncClient, followers: list[Follower], pid: int, args: argparse.Namespace
) -> tuple[float, list[float]]:
    """The frontend's cores with `followers` open and idle, and each event's delay to each."""
    async with asyncio.timeout(60):
        await asyncio.gather(*(f.open.wait() for f in followers))
    log(f"{args.followers} followers open; letting them settle for {args.settle_s:.0f} s")
    await asyncio.sleep(args.settle_s)
    log(f"measuring the frontend with them idle for {args.seconds:.0f} s")
    cores = await asyncio.to_thread(frontend_cores, pid, args.seconds)
    delays: list[float] = []
    log(f"timing {args.jobs} events to every follower")
    for number in range(args.jobs):
        name = f"bench-{number}"
        sent = time.monotonic()
        answer = await client.post("/v1/jobs", json={**JOB, "name": name})
        answer.raise_for_status()
        handle = f"default/{name}"
        async with asyncio.timeout(30):
            await asyncio.gather(*(f.arrived[handle].wait() for f in followers))
        delays += [f.submitted[handle] - sent for f in followers]
        await asyncio.sleep(1)
    return cores, delays


def measure(region: LocalRegion, args: argparse.Namespace) -> dict[str, Any]:
    log("starting a default region")
    region.start()
    log(f"ready; letting it settle for {args.settle_s:.0f} s")
    time.sleep(args.settle_s)
    pid = region.service_pids()["frontend"]
    log(f"measuring the frontend alone for {args.seconds:.0f} s")
    alone = frontend_cores(pid, args.seconds)
    results = asyncio.run(followed(region, pid, args))
    return {
        "frontend_cores_alone": round(alone, 4),
        **results,
        "followers_core_share": round(results["frontend_cores_followed"] - alone, 4),
    }


def main() -> None:
    stop_on_signals()
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as directory:
        region = LocalRegion(
            Path(directory) / "tether",
            store_args=["--etcd"] if args.store == "etcd" else [],
            timings={},
            fencing_s=DEFAULT_FENCING_S,
        )
        try:
            results = measure(region, args)
        finally:
            region.cleanup()
    print(
        json.dumps(
            {
                "benchmark": "events-followers",
                "store": args.store,
                "followers": args.followers,
                "seconds": args.seconds,
                **results,
            }
        )
    )


if __name__ == "__main__":
    main()
