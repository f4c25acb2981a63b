#!/usr/bin/env python3
"""The cost of many idle etcd watches in one process, as the simulated agents of
`tether agent-sim` or a service with many mirrors hold them.

Opens `--watches` watches on distinct prefixes of one store client, proves each one delivers (a
key is put under every prefix and every watch must see it), then measures the process's CPU
while nothing changes for `--seconds`. Prints one JSON line: `idle_cores` (CPU seconds per
second), `established_s`, `delivered_s` (every watch has seen its key), `setup_cpu_s` (the
process's CPU until then) and `peak_rss_mib`, the process's peak RSS. Without --url it starts a
private etcd server (data on tmpfs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time

from benchkit import stop_on_signals

from tether.store import Put, Store, open_store
from tether.store.etcd_server import EtcdServer

PREFIX = "/bench/watches/"
PUTS_PER_TXN = 100


async def follow(store: Store, prefix: str, start_revision: int, seen: asyncio.Event) -> None:
    async with store.watch(prefix, start_revision=start_revision) as watch:
        async for _ in watch:
            seen.set()


async def measure(url: str, watches: int, seconds: float) -> dict[str, object]:
    async with open_store(url) as store:
        start_revision = await store.revision() + 1
        prefixes = [f"{PREFIX}{i:06d}/" for i in range(watches)]
        seen = [asyncio.Event() for _ in prefixes]
        began, cpu_began = time.perf_counter(), time.process_time()
        followers = [
            asyncio.create_task(follow(store, prefix, start_revision, event))
            for prefix, event in zip(prefixes, seen, strict=True)
        ]
        await asyncio.sleep(0)
        established_s = time.perf_counter() - began
        for first in range(0, watches, PUTS_PER_TXN):
            batch = prefixes[first : first + PUTS_PER_TXN]
            await store.txn((), [Put(prefix + "k", b"x") for prefix in batch])
        for done, event in enumerate(seen):
            await event.wait()
            if done and done % 5000 == 0:
                print(f"{done} of {watches} watches delivered", file=sys.stderr)
        delivered_s = time.perf_counter() - began
        setup_cpu_s = time.process_time() - cpu_began
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        idle_cores = (time.process_time() - cpu_before) / (time.perf_counter() - wall_before)
        for follower in followers:
            follower.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
    return {
        "watches": watches,
        "seconds": seconds,
        "idle_cores": round(idle_cores, 3),
        "established_s": round(established_s, 2),
        "delivered_s": round(delivered_s, 2),
        "setup_cpu_s": round(setup_cpu_s, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--watches", type=int, default=20_000, help="watches to hold")
    parser.add_argument("--seconds", type=float, default=30.0, help="idle time measured")
    parser.add_argument("--url", help="an existing etcd store (default: a private server)")
    args = parser.parse_args()
    if args.url is not None:
        result = asyncio.run(measure(args.url, args.watches, args.seconds))
    else:
        with EtcdServer(on_tmpfs=True) as server:
            result = asyncio.run(measure(server.url, args.watches, args.seconds))
    print(json.dumps({"benchmark": "watches-idle", "store": "etcd", **result}))


if __name__ == "__main__":
    main()
