#!/usr/bin/env python3
"""Store throughput: single puts (64 concurrent), 100-put transactions, and watch delivery.

Prints one JSON line: backend, put_per_s, txn_keys_per_s, watch_events_per_s (and the counts and
durations behind them). Without --url, the sql backend uses a fresh SQLite file and the etcd
backend a fresh local etcd server with its data on disk, as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from benchkit import stop_on_signals

from tether.store import Put, Store, open_store
from tether.store.etcd_server import EtcdServer

VALUE = b"x" * 256


async def bench_puts(store: Store, total: int, concurrency: int) -> float:
    per_worker = total // concurrency

    async def worker(w: int) -> None:
        for i in range(per_worker):
            await store.put(f"/bench/put/{w}/{i}", VALUE)

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return per_worker * concurrency / (time.perf_counter() - start)


async def bench_txns(store: Store, txns: int, keys_per_txn: int, concurrency: int) -> float:
    per_worker = txns // concurrency

    async def worker(w: int) -> None:
        for t in range(per_worker):
            ops = [Put(f"/bench/txn/{w}/{t}/{k}", VALUE) for k in range(keys_per_txn)]
            await store.txn((), ops)

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return per_worker * concurrency * keys_per_txn / (time.perf_counter() - start)


async def bench_watch(store: Store, events: int) -> float:
    """Writes `events` changes in 100-key transactions, then times a watch replaying them."""
    start_revision = await store.revision() + 1
    for t in range(events // 100):
        await store.txn((), [Put(f"/bench/watch/{t}/{k}", VALUE) for k in range(100)])
    received = 0
    start = time.perf_counter()
    async with store.watch("/bench/watch/", start_revision=start_revision) as watch:
        async for revision in watch:
            received += len(revision)
            if received >= events:
                break
    return received / (time.perf_counter() - start)


async def run(url: str, args: argparse.Namespace) -> dict[str, object]:
    async with open_store(url) as store:
        puts = await bench_puts(store, args.puts, 64)
        txn_keys = await bench_txns(store, args.txns, 100, 8)
        watch = await bench_watch(store, args.watch_events)
    return {
        "put_per_s": round(puts),
        "txn_keys_per_s": round(txn_keys),
        "watch_events_per_s": round(watch),
        "puts": args.puts,
        "txns_of_100": args.txns,
        "watch_events": args.watch_events,
        "value_bytes": len(VALUE),
    }


def main() -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["sql", "etcd"], required=True)
    parser.add_argument("--url", help="an existing store to measure (default: a fresh one)")
    parser.add_argument("--puts", type=int, default=20_000, help="single puts in total")
    parser.add_argument("--txns", type=int, default=400, help="100-put transactions in total")
    parser.add_argument("--watch-events", type=int, default=50_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        server: EtcdServer | None = None
        url = args.url
        if url is None and args.backend == "sql":
            url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        elif url is None:
            server = EtcdServer(Path(tmp) / "etcd")
            server.start()
            url = server.url
        try:
            result = asyncio.run(run(url, args))
        finally:
            if server is not None:
                server.cleanup()
    print(json.dumps({"backend": args.backend, **result}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
