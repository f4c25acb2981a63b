#!/usr/bin/env python3
"""Store throughput: single puts (64 concurrent), 100-put transactions, and watch delivery.

Prints one JSON line: backend, put_per_s, txn_keys_per_s, watch_events_per_s (and the counts and
durations behind them). Without --url, the sql backend uses a fresh SQLite file and the etcd
backend a fresh local etcd server with its data on disk, as in production; on that server it
also reports what etcd's own CPU costs: `etcd_cpu_us_per_put` (a write of one key) and
`etcd_cpu_us_per_txn_key` (a key of a 100-put transaction). Their difference is roughly what a
write costs etcd whatever it holds: what batching more keys into fewer writes saves.
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

# CPU from /proc, as the region benchmarks read it: test tooling (tests/support).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.harness import cpu_seconds
from tether.store import Put, Store, open_store
from tether.store.etcd_server import EtcdServer

VALUE = b"x" * 256


def share(total: int, workers: int, worker: int) -> int:
    """Worker `worker`'s part of `total` operations split as evenly as can be."""
    return total // workers + (worker < total % workers)


async def bench_puts(store: Store, total: int, concurrency: int) -> float:
    async def worker(w: int) -> None:
        for i in range(share(total, concurrency, w)):
            await store.put(f"/bench/put/{w}/{i}", VALUE)

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return total / (time.perf_counter() - start)


async def bench_txns(store: Store, txns: int, keys_per_txn: int, concurrency: int) -> float:
    async def worker(w: int) -> None:
        for t in range(share(txns, concurrency, w)):
            ops = [Put(f"/bench/txn/{w}/{t}/{k}", VALUE) for k in range(keys_per_txn)]
            await store.txn((), ops)

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return txns * keys_per_txn / (time.perf_counter() - start)


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


async def run(url: str, args: argparse.Namespace, etcd_pid: int | None) -> dict[str, object]:
    """The measurements; with `etcd_pid`, etcd's CPU per put and per key of a transaction."""
    etcd_cpu: list[float] = []

    def note_etcd_cpu() -> None:
        if etcd_pid is not None:
            etcd_cpu.append(cpu_seconds(etcd_pid))

    async with open_store(url) as store:
        note_etcd_cpu()
        puts = await bench_puts(store, args.puts, 64)
        note_etcd_cpu()
        txn_keys = await bench_txns(store, args.txns, 100, 8)
        note_etcd_cpu()
        watch_events = args.watch_events - args.watch_events % 100
        watch = await bench_watch(store, watch_events)
    costs = {}
    if etcd_cpu:
        costs = {
            "etcd_cpu_us_per_put": round(1e6 * (etcd_cpu[1] - etcd_cpu[0]) / args.puts, 1),
            "etcd_cpu_us_per_txn_key": round(
                1e6 * (etcd_cpu[2] - etcd_cpu[1]) / (100 * args.txns), 1
            ),
        }
    return {
        "put_per_s": round(puts),
        "txn_keys_per_s": round(txn_keys),
        "watch_events_per_s": round(watch),
        **costs,
        "puts": args.puts,
        "txns_of_100": args.txns,
        "watch_events": watch_events,
        "value_bytes": len(VALUE),
    }


def main() -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sql", "etcd"], required=True)
    parser.add_argument("--url", help="an existing store to measure (default: a fresh one)")
    parser.add_argument("--puts", type=int, default=20_000, help="single puts in total")
    parser.add_argument("--txns", type=int, default=400, help="100-put transactions in total")
    parser.add_argument(
        "--watch-events",
        type=int,
        default=50_000,
        help="changes a watch replays, written 100 to a transaction",
    )
    args = parser.parse_args()
    if args.puts < 1 or args.txns < 1 or args.watch_events < 100:
        parser.error("--puts and --txns must be at least 1, --watch-events at least 100")

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
            etcd_pid = None if server is None or server.process is None else server.process.pid
            result = asyncio.run(run(url, args, etcd_pid))
        finally:
            if server is not None:
                server.cleanup()
    print(json.dumps({"backend": args.backend, **result}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
