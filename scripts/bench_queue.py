#!/usr/bin/env python3
"""A deep queue: admission decisions and `GET /v1/queues/{entitlement}` with 10,000 jobs waiting.

Two measurements on one entitlement whose quota holds --running jobs of one task while --queued
more wait (every job one task, the running ones finishing one at a time):

- the decider's pass (`AdmissionQueues.decide`, the code every shard leader runs, in this
  process on a real `QuotaTree`): one job of the running ones ends, and the pass admits the
  head of the queue; repeated --passes times (at most --queued). Reports
  `admission_decision_p50_ms` and `admission_decision_p99_ms`.
- the frontend's answer: a private etcd holds the --queued admission records, an in-process
  frontend orders them from its watch, and a client reads `GET /v1/queues/{entitlement}`
  --reads times: the default page (the first 1000 jobs; `get_queue_p50_ms`, `get_queue_p99_ms`)
  and the whole queue in one answer (`get_whole_queue_p50_ms`, `get_whole_queue_p99_ms`), with
  the answers' sizes (`get_queue_bytes`, `get_whole_queue_bytes`).

Prints one JSON line on stdout (progress on stderr). Targets (issue 19): decisions p99 <= 5 ms,
GET p99 <= 100 ms.

Usage: .venv/bin/python scripts/bench_queue.py [--queued 10000] [--running 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
from benchkit import log, stop_on_signals

from tether.frontend.api.queues import DEFAULT_QUEUE_PAGE
from tether.frontend.service import Frontend
from tether.frontend.settings import FrontendSettings
from tether.model import (
    Entitlement,
    PrincipalRecord,
    Quota,
    RegionConfig,
    Resources,
    Role,
    to_json,
    token_digest,
)
from tether.model.admission import Admission, AdmissionState
from tether.scheduler.admission.queued import QueuedJob
from tether.scheduler.admission.queues import AdmissionQueues
from tether.store import Put, keys, open_store
from tether.store.etcd_server import EtcdServer

ENTITLEMENT = "deep"
TASK = Resources(cpu=100, memory_mib=64)
TOKEN = "bench-admin"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queued", type=int, default=10_000, help="jobs waiting (10000)")
    parser.add_argument("--running", type=int, default=100, help="jobs the quota holds (100)")
    parser.add_argument("--passes", type=int, default=500, help="decider passes timed (500)")
    parser.add_argument("--reads", type=int, default=50, help="GET requests timed (50)")
    args = parser.parse_args()
    if min(args.queued, args.running, args.passes, args.reads) < 1:
        parser.error("--queued, --running, --passes and --reads must be at least 1")
    if args.passes > args.queued:
        parser.error("--passes must not exceed --queued: each pass admits one waiting job")
    return args


def record(index: int, now: datetime) -> Admission:
    """Job `index`'s admission record: queued, a second after the one before it, every tenth
    with a deadline and a higher priority every hundredth, so the order is not the keys'."""
    at = now + timedelta(seconds=index)
    return Admission(
        job=f"{ENTITLEMENT}/j{index:05d}",
        priority=200 if index % 100 == 0 else 100,
        start_deadline=at + timedelta(hours=1) if index % 10 == 0 else None,
        queued_at=at,
        task_resources=TASK,
        tasks=1,
        least_tasks=1,
        updated_at=at,
    )


def entitlement(running: int) -> Entitlement:
    return Entitlement(
        name=ENTITLEMENT,
        quota=Quota(resources=TASK * running),
        members=["bench"],
    )


def decisions(args: argparse.Namespace) -> list[float]:
    """Milliseconds of each pass that admits the head after one running job ended (at most
    `args.queued` passes: each admits one waiting job)."""
    now = datetime.now(UTC)
    queues = AdmissionQueues([entitlement(args.running)], 1001)
    for index in range(args.running + args.queued):
        queues.put(QueuedJob(ENTITLEMENT, record(index, now), 1, holding=0))
    queues.decide(now)  # admits the first --running
    admitted = [j for j in queues.jobs.values() if j.admission.state is AdmissionState.ADMITTED]
    timings = []
    for _ in range(args.passes):
        ended = admitted.pop(0)
        queues.remove(ended.handle)
        started = time.perf_counter()
        outcome = queues.decide(now)
        timings.append((time.perf_counter() - started) * 1000)
        [decision] = [d for d in outcome.decisions if d.admission.admitted]
        admitted.append(queues.jobs[decision.admission.job])
    return timings


async def reads(args: argparse.Namespace, limit: int) -> tuple[list[float], int]:
    """Milliseconds of each GET of a page of `limit` jobs from the head, and the answer's size
    in bytes."""
    with EtcdServer(on_tmpfs=True) as server:
        async with open_store(server.url) as store:
            now = datetime.now(UTC)
            config = RegionConfig(name="bench", shards=["shard-0"], created_at=now)
            admin = PrincipalRecord(name="bench", roles=[Role.ADMIN])
            await store.put(keys.region_config(), to_json(config))
            await store.put(keys.principal(token_digest(TOKEN)), to_json(admin))
            await store.put(keys.entitlement(ENTITLEMENT), to_json(entitlement(args.running)))
            log(f"writing {args.queued} admission records")
            for start in range(0, args.queued, 1000):
                puts = [
                    Put(keys.admission(ENTITLEMENT, f"j{i:05d}"), to_json(record(i, now)))
                    for i in range(start, min(start + 1000, args.queued))
                ]
                await store.txn([], puts)
            frontend = Frontend(open_store(server.url), FrontendSettings(host="127.0.0.1", port=0))
            await frontend.start()
            try:
                headers = {"Authorization": f"Bearer {TOKEN}"}
                async with httpx.AsyncClient(base_url=frontend.url, headers=headers) as client:
                    path = f"/v1/queues/{ENTITLEMENT}?limit={limit}"
                    # The first answer waits for the frontend's listing of the records.
                    (await client.get(path, timeout=60)).raise_for_status()
                    timings, size = [], 0
                    for _ in range(args.reads):
                        started = time.perf_counter()
                        answer = await client.get(path)
                        timings.append((time.perf_counter() - started) * 1000)
                        answer.raise_for_status()
                        size = len(answer.content)
                    queue = answer.json()
                    assert queue["total"] == args.queued, queue["total"]
                    assert len(queue["jobs"]) == min(limit, args.queued)
                    assert queue["jobs"][0]["priority"] == 200
            finally:
                await frontend.stop()
    return timings, size


def main() -> None:
    stop_on_signals()
    args = parse_args()
    log(f"deciding with {args.queued} queued, {args.passes} passes")
    passes = decisions(args)
    page, page_size = asyncio.run(reads(args, DEFAULT_QUEUE_PAGE))
    whole, whole_size = asyncio.run(reads(args, args.queued))
    result = {
        "benchmark": "queue",
        "queued": args.queued,
        "running": args.running,
        "passes": args.passes,
        "admission_decision_p50_ms": round(float(np.percentile(passes, 50)), 3),
        "admission_decision_p99_ms": round(float(np.percentile(passes, 99)), 3),
        "reads": args.reads,
        "get_queue_page": DEFAULT_QUEUE_PAGE,
        "get_queue_p50_ms": round(float(np.percentile(page, 50)), 1),
        "get_queue_p99_ms": round(float(np.percentile(page, 99)), 1),
        "get_queue_bytes": page_size,
        "get_whole_queue_p50_ms": round(float(np.percentile(whole, 50)), 1),
        "get_whole_queue_p99_ms": round(float(np.percentile(whole, 99)), 1),
        "get_whole_queue_bytes": whole_size,
    }
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
