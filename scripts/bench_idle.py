#!/usr/bin/env python3
"""What an idle region costs: a default region (`tether up` as `scripts/up` starts it: 4 agents,
2 shards, one frontend, the services' own leases and periods) with no job, on SQLite or etcd.

Starts the region, waits until it is ready and --settle-s more (the leaders elected, the first
health pass done), then measures:

- `idle_cores`: the CPU of every process of the region (the services and agents, `tether up`
  itself, and etcd), from /proc, over --seconds without a write of ours, in cores;
- `watch_latency_p50_ms`, `watch_latency_p99_ms`: from another process's write to the store
  until a watch in this process sees it, over --writes writes made after that window, a tenth
  of a second apart (the writer stamps each value with the time it wrote; one clock).

Prints one JSON line on stdout (progress on stderr): `benchmark`, `store`, `seconds`,
`idle_cores`, `cpu_s` (per process), `writes`, `watch_latency_p50_ms` and
`watch_latency_p99_ms`.

Usage: .venv/bin/python scripts/bench_idle.py --store sqlite|etcd [--seconds 60] [--writes 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from benchkit import log, stop_on_signals

# The region harness is test tooling (tests/support), shared with the end-to-end tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.harness import LocalRegion, cpu_seconds
from tether.model import DEFAULT_FENCING_S
from tether.store import keys, open_store

PREFIX = keys.ROOT + "bench-idle/"
WRITE_PAUSE_S = 0.1
WRITER = """
import asyncio, sys, time
from tether.store import open_store

async def main(url: str, prefix: str, count: int, pause: float) -> None:
    async with open_store(url) as store:
        for number in range(count):
            await store.put(f"{prefix}{number}", repr(time.time()).encode())
            await asyncio.sleep(pause)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--store", choices=("sqlite", "etcd"), default="sqlite", help="the region's store"
    )
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="how long the idle CPU is measured (60)"
    )
    parser.add_argument(
        "--writes", type=int, default=100, help="writes another process makes, timed (100)"
    )
    parser.add_argument(
        "--settle-s", type=float, default=10.0, help="wait after the region is ready (10)"
    )
    args = parser.parse_args()
    if args.seconds <= 0 or args.writes < 1 or args.settle_s < 0:
        parser.error("--seconds must be positive, --writes at least 1, --settle-s not negative")
    return args


def region_pids(region: LocalRegion) -> dict[str, int]:
    state = region.state()
    assert region.process is not None
    pids = {**region.service_pids(), "tether up": region.process.pid}
    if state.etcd_pid:
        pids["etcd"] = state.etcd_pid
    return pids


async def watch_latencies(store_url: str, writes: int) -> list[float]:
    """Seconds from each write of a writer process until our watch delivered it."""
    latencies: list[float] = []
    async with open_store(store_url) as store:
        start = await store.revision() + 1
        async with store.watch(PREFIX, start_revision=start) as watch:
            writer = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                WRITER,
                store_url,
                PREFIX,
                str(writes),
                str(WRITE_PAUSE_S),
                stderr=subprocess.PIPE,
            )
            async with asyncio.timeout(writes * WRITE_PAUSE_S + 60):
                async for events in watch:
                    seen = time.time()
                    latencies += [seen - float(event.kv.value) for event in events]
                    if len(latencies) >= writes:
                        break
            _, errors = await writer.communicate()
            if writer.returncode != 0:
                raise SystemExit(f"the writer failed:\n{errors.decode()}")
    return latencies


def measure(region: LocalRegion, args: argparse.Namespace) -> dict[str, Any]:
    log("starting a default region")
    region.start()
    log(f"ready; letting it settle for {args.settle_s:.0f} s")
    time.sleep(args.settle_s)
    pids = region_pids(region)
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.monotonic()
    log(f"measuring {len(pids)} idle processes for {args.seconds:.0f} s")
    time.sleep(args.seconds)
    elapsed = time.monotonic() - started
    cpu = {name: round(cpu_seconds(pid) - before[name], 2) for name, pid in pids.items()}
    log(f"timing {args.writes} writes from another process")
    latencies = np.array(asyncio.run(watch_latencies(region.store_url(), args.writes))) * 1000
    return {
        "seconds": round(elapsed, 1),
        "idle_cores": round(sum(cpu.values()) / elapsed, 4),
        "cpu_s": cpu,
        "writes": len(latencies),
        "watch_latency_p50_ms": round(float(np.percentile(latencies, 50)), 1),
        "watch_latency_p99_ms": round(float(np.percentile(latencies, 99)), 1),
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
    print(json.dumps({"benchmark": "region-idle", "store": args.store, **results}))


if __name__ == "__main__":
    main()
