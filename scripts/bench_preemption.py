#!/usr/bin/env python3
"""Preemption on a real region: from a high-priority job's submission to its tasks RUNNING.

Starts a whole region on a local etcd (`tether up --etcd` through the harness, real agents and
task processes) and measures, --trials times each:

- priority: an entitlement of --tasks tasks runs a low-priority batch job that fills it; a job
  of twice its priority and as many tasks is submitted, preempts it and runs; the time from the
  submission to all its tasks RUNNING, once with the entitlement's grace (`preemption.grace_s`)
  0 and once 5 s. The low job's TaskController approves nothing, so every victim holds its
  quota until its grace runs out: the worst case a preemptor waits.
- reclaim: an org of two teams; `borrower` (no quota of its own) runs --tasks tasks on the quota
  `lender` does not use; `lender` submits as many, within its quota, and takes it back. The
  time from the submission to its tasks RUNNING, against issue 19's target: the borrower's
  grace (5 s) + 5 s.

After the run every revision of the allocation entries is replayed from etcd: no entitlement
may ever have held more than its quota and borrowing limit.

Prints one JSON line on stdout (progress on stderr): `preemption_latency_grace_0_p50_s`,
`preemption_latency_grace_0_p99_s`, `preemption_latency_grace_5_p50_s`,
`preemption_latency_grace_5_p99_s`, `reclaim_latency_p50_s`, `reclaim_latency_p99_s` and
`reclaim_latency_max_s` against `reclaim_target_s` (`reclaim_met`), and from the replay
`revisions_replayed` and `over_quota_revisions` (must be 0).

Usage: .venv/bin/python scripts/bench_preemption.py [--trials 10] [--tasks 4]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from benchkit import log, stop_on_signals

# The region harness is test tooling (tests/support), shared with the end-to-end tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.harness import LocalRegion, all_running, get_json, submit, wait_for
from tests.support.preempt_controller import Controller
from tests.support.quota_audit import over_quota_revisions
from tether.model import Entitlement, from_json
from tether.store import keys, open_store

TASK_CPU, TASK_MEMORY_MIB = 100, 64
RECLAIM_GRACE_S = 5.0
RECLAIM_SLACK_S = 5.0
"""Issue 19: reclaimed quota is back with its owner within the grace + 5 s."""
TIMEOUT_S = 120.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=10, help="preemptions timed per case (10)")
    parser.add_argument("--tasks", type=int, default=4, help="tasks of every job (4)")
    return parser.parse_args()


def job(name: str, entitlement: str, tasks: int, *, seconds: int, priority: int) -> dict[str, Any]:
    """A batch job whose tasks sleep `seconds` and exit."""
    return {
        "name": name,
        "entitlement": entitlement,
        "count": tasks,
        "kind": "batch",
        "priority": priority,
        "task": {
            "package": "sleeper",
            "version": "1",
            "command": "/bin/sh",
            "args": ["-c", f"exec sleep {seconds}"],
            "resources": {"cpu": TASK_CPU, "memory_mib": TASK_MEMORY_MIB},
            "restart": {"mode": "on-failure", "backoff_initial_s": 0.5, "backoff_max_s": 2},
        },
    }


def quota(tasks: int) -> dict[str, Any]:
    return {"cpu": TASK_CPU * tasks, "memory_mib": TASK_MEMORY_MIB * tasks}


def create(client: httpx.Client, body: dict[str, Any]) -> None:
    # Preempting one job every trial: the per-job limit (6 an hour) would stop the run.
    policy = {"max_per_job_per_hour": 1000, **body.pop("preemption", {})}
    created = client.post("/v1/entitlements", json={**body, "preemption": policy})
    assert created.status_code == 201, created.text


def timed_start(client: httpx.Client, spec: dict[str, Any]) -> float:
    """Submits `spec`; seconds until all its tasks run."""
    started = time.monotonic()
    handle = submit(client, spec)
    wait_for(
        lambda: all_running(client, handle, spec["count"]),
        timeout_s=TIMEOUT_S,
        what=f"{handle} running",
        interval_s=0.05,
    )
    return time.monotonic() - started


def preemptions(
    region: LocalRegion,
    client: httpx.Client,
    victim: str,
    preemptor: Callable[..., dict[str, Any]],
    args: argparse.Namespace,
    case: str,
) -> list[float]:
    """Seconds from each submission of `preemptor(name, seconds=2)` to its tasks running, while
    `victim` runs with a controller that lets its grace run out; `victim` runs again in between."""
    timings = []
    with Controller(region, victim, ttl_s=3600):
        for trial in range(args.trials):
            timings.append(timed_start(client, preemptor(f"preemptor-{trial}", seconds=2)))
            log(f"{case}, trial {trial + 1}: running after {timings[-1]:.2f} s")
            wait_for(
                lambda: all_running(client, victim, args.tasks),
                timeout_s=TIMEOUT_S,
                what=f"{victim} running again (once the preemptor has finished)",
            )
    return timings


def preempting(region: LocalRegion, args: argparse.Namespace, grace_s: float) -> list[float]:
    """Seconds from each high-priority submission to its tasks running, at `grace_s`."""
    name = f"grace-{grace_s:g}"
    with region.client() as client:
        create(
            client,
            {
                "name": name,
                "quota": {"resources": quota(args.tasks)},
                "preemption": {"grace_s": grace_s},
                "members": ["admin"],
            },
        )
        low = submit(client, job("low", name, args.tasks, seconds=3600, priority=100))
        wait_for(lambda: all_running(client, low, args.tasks), timeout_s=TIMEOUT_S, what="low")
        high = functools.partial(job, entitlement=name, tasks=args.tasks, priority=200)
        timings = preemptions(region, client, low, high, args, f"grace {grace_s:g} s")
        # Its machines go back to the free pool for the next case.
        assert client.delete(f"/v1/jobs/{low}").status_code == 202
    return timings


def reclaiming(region: LocalRegion, args: argparse.Namespace) -> list[float]:
    """Seconds from each of the lender's submissions to its tasks running."""
    with region.client() as client:
        create(client, {"name": "org", "quota": {"resources": quota(args.tasks)}})
        create(
            client,
            {
                "name": "lender",
                "parent": "org",
                "quota": {"resources": quota(args.tasks)},
                "members": ["admin"],
            },
        )
        create(
            client,
            {
                "name": "borrower",
                "parent": "org",
                "borrowing_limit": quota(args.tasks),
                "preemption": {"grace_s": RECLAIM_GRACE_S},
                "members": ["admin"],
            },
        )
        borrower = submit(client, job("wide", "borrower", args.tasks, seconds=3600, priority=900))
        wait_for(
            lambda: all_running(client, borrower, args.tasks), timeout_s=TIMEOUT_S, what="borrower"
        )
        own = functools.partial(job, entitlement="lender", tasks=args.tasks, priority=1)
        return preemptions(region, client, borrower, own, args, "reclaim")


async def audit(store_url: str, start: int) -> tuple[int, list[str]]:
    async with open_store(store_url) as store:
        end = await store.revision()
        found = await store.range(keys.ENTITLEMENTS)
        entitlements = [from_json(Entitlement, kv.value, stored=True) for kv in found.kvs]
        return end - start, await over_quota_revisions(store, entitlements, start, end)


async def revision(store_url: str) -> int:
    async with open_store(store_url) as store:
        return await store.revision()


def percentiles(prefix: str, timings: list[float]) -> dict[str, float]:
    return {
        f"{prefix}_p50_s": round(float(np.percentile(timings, 50)), 2),
        f"{prefix}_p99_s": round(float(np.percentile(timings, 99)), 2),
    }


def main() -> None:
    stop_on_signals()
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-preemption-") as directory:
        region = LocalRegion(
            Path(directory) / "tether",
            store_args=["--etcd"],
            up_args=["--non-preemptible-priority", "1000"],
            # Machines an entitlement no longer uses go back to the free pool after a second
            # (not five minutes), so each case's entitlements find some.
            extra_env={
                "TETHER_ALLOCATOR_IDLE_RETURN_S": "1",
                "TETHER_ALLOCATOR_IDLE_CHECK_S": "0.5",
            },
        )
        try:
            region.start()
            start = asyncio.run(revision(region.store_url()))
            results: dict[str, Any] = {}
            for grace_s in (0.0, 5.0):
                timings = preempting(region, args, grace_s)
                results |= percentiles(f"preemption_latency_grace_{grace_s:g}", timings)
            reclaims = reclaiming(region, args)
            results |= percentiles("reclaim_latency", reclaims)
            results["reclaim_latency_max_s"] = round(max(reclaims), 2)
            revisions, over = asyncio.run(audit(region.store_url(), start))
            with region.client() as client:
                reported = get_json(client, "/v1/queues")["queues"]
            log(f"{len(reported)} entitlements reported; {revisions} revisions replayed")
        finally:
            region.cleanup()
    for line in over[:5]:
        log(f"over quota: {line}")
    target = RECLAIM_GRACE_S + RECLAIM_SLACK_S
    print(
        json.dumps(
            {
                "benchmark": "preemption",
                "store": "etcd",
                "tasks": args.tasks,
                "trials": args.trials,
                **results,
                "reclaim_target_s": target,
                "reclaim_met": results["reclaim_latency_max_s"] <= target,
                "revisions_replayed": revisions,
                "over_quota_revisions": len(over),
            }
        )
    )


if __name__ == "__main__":
    main()
