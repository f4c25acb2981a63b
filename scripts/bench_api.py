#!/usr/bin/env python3
"""The REST API under load: many clients submit, read, scale and delete jobs on two frontends.

Starts a whole region on a local etcd (`tether up --etcd --frontends 2` through the harness, real
agents running the tasks as real processes) and an entitlement whose quota never refuses the
clients' jobs. Then --clients clients (asyncio + httpx, in this process) each run, for --seconds,
the life of one small job after another, sending each request to the next frontend in turn:
submit a job of 1 to 3 sleeper tasks, then 10 to 40 requests that read it (85%) or scale it by
one task, between 1 and 3 (15%), then delete it. Reads dominate, as on a real region's API, and
each task that starts or stops is a real process (a Python shim and its task), which on two
cores costs far more than a request. Afterwards it checks that the store holds what the clients were
told: every job a client was last told exists (through the REST API and directly in the store)
with the count it last set, and every job it deleted is gone or being deleted.

Prints one JSON line on stdout (progress goes to stderr): requests, requests_per_s, p50_ms,
p99_ms, errors_5xx (must be 0), errors_4xx, transport_errors (requests that failed even when sent
again), retried (sent again after the server closed a kept-alive connection), per operation its
count, p50_ms and p99_ms, jobs_checked, state_matches_store and the first mismatches if any, and
cpu_s: the CPU seconds each process used during the load (the clients are this process).

With --reads the clients only read: --jobs jobs of 3 sleeper tasks are submitted first, then
every client GETs one of them (the job, or its tasks) after another, from the frontends' caches
(with --consistent, `?consistent=true`: from the store, as every GET did before the cache). The
JSON line then has mode, jobs_read, reads, reads_per_s, read_p50_ms, read_p99_ms,
frontend_cpu_ms_per_read (the frontends' CPU over the reads), errors_5xx, errors_4xx,
transport_errors and cpu_s.

Usage: .venv/bin/python scripts/bench_api.py [--seconds 60] [--clients 50] [--reads [--consistent]]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from apibench.reads import read_load
from benchkit import log, stop_on_signals

# The region harness is test tooling (tests/support), shared with the end-to-end tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.harness import LocalRegion, cpu_seconds, sleeper_job
from tether.model import Job, from_json
from tether.store import keys, open_store

ENTITLEMENT = "bench"
OPERATIONS = ("submit", "get", "scale", "delete")
MAX_TASKS = 3
REQUESTS_PER_JOB = (10, 40)
READ_SHARE = 0.85
REQUEST_TIMEOUT_S = 30.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60, help="how long the clients run")
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients")
    parser.add_argument("--frontends", type=int, default=2, help="frontends they spread over")
    parser.add_argument("--agents", type=int, default=4, help="local agents (machines)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the clients' choices")
    parser.add_argument(
        "--reads",
        action="store_true",
        help="a pure-read load instead: --jobs jobs submitted first, then every client reads "
        "one of them (GET of the job, or of its tasks) after another",
    )
    parser.add_argument("--jobs", type=int, default=20, help="jobs the --reads load reads")
    parser.add_argument(
        "--consistent",
        action="store_true",
        help="with --reads: every GET reads the store (?consistent=true), not the cache",
    )
    return parser.parse_args()


@dataclass
class Told:
    """What a client was last told of one job."""

    count: int
    deleted: bool = False


@dataclass
class Tally:
    """Every request's outcome, by operation."""

    latencies_ms: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: Counter[int] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    unexpected: list[str] = field(default_factory=list)


class Client:
    """One client: the life of one job after another, each request on the next frontend."""

    def __init__(
        self,
        number: int,
        frontends: list[httpx.AsyncClient],
        tally: Tally,
        told: dict[str, Told],
        rng: random.Random,
    ) -> None:
        self._number = number
        self._frontends = itertools.cycle(frontends[number % len(frontends) :] + frontends)
        self._tally = tally
        self._told = told
        self._rng = rng
        self._jobs = itertools.count()
        self._written = 0
        """The revision of this client's newest write: it reads at least that (read-your-writes,
        as TetherClient does), whichever frontend it asks."""

    async def _request(
        self,
        operation: str,
        method: str,
        path: str,
        expected: tuple[int, ...],
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response | None:
        http = next(self._frontends)
        params = {"min_revision": self._written} if method == "GET" and self._written else None
        started = time.perf_counter()
        try:
            try:
                response = await http.request(
                    method, path, json=body, headers=headers, params=params
                )
            except (httpx.RemoteProtocolError, httpx.ReadError):
                # The server closed a kept-alive connection as it was reused (uvicorn's
                # keep-alive timeout): every request here is safe to send again.
                self._tally.retries += 1
                response = await http.request(
                    method, path, json=body, headers=headers, params=params
                )
        except httpx.HTTPError as error:
            self._tally.transport_errors[type(error).__name__] += 1
            return None
        if method != "GET" and "x-tether-revision" in response.headers:
            self._written = max(self._written, int(response.headers["x-tether-revision"]))
        self._tally.latencies_ms[operation].append((time.perf_counter() - started) * 1000)
        self._tally.statuses[response.status_code] += 1
        if response.status_code not in expected:
            self._tally.unexpected.append(
                f"{operation} {path}: {response.status_code} {response.text[:200]}"
            )
            return None
        return response

    async def run(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            name = f"c{self._number:03d}-{next(self._jobs)}"
            handle = f"{ENTITLEMENT}/{name}"
            count = self._rng.randint(1, MAX_TASKS)
            spec = sleeper_job(name, count, entitlement=ENTITLEMENT)
            # The key makes a submission sent again (see _request) return the job it made.
            key = {"Idempotency-Key": name}
            if await self._request("submit", "POST", "/v1/jobs", (200, 201), spec, key) is None:
                continue
            self._told[handle] = Told(count)
            for _ in range(self._rng.randint(*REQUESTS_PER_JOB)):
                if time.monotonic() >= deadline:
                    return
                if self._rng.random() < READ_SHARE:
                    await self._request("get", "GET", f"/v1/jobs/{handle}", (200,))
                    continue
                count = max(1, min(MAX_TASKS, count + self._rng.choice((-1, 1))))
                scaled = await self._request(
                    "scale", "POST", f"/v1/jobs/{handle}/scale", (200,), {"count": count}
                )
                if scaled is not None:
                    self._told[handle].count = scaled.json()["count"]
            if time.monotonic() >= deadline:
                return
            if await self._request("delete", "DELETE", f"/v1/jobs/{handle}", (202,)) is not None:
                self._told[handle].deleted = True


async def load(
    urls: list[str], token: str, args: argparse.Namespace
) -> tuple[Tally, dict[str, Told], float]:
    """Runs the clients until the deadline; returns what happened, what they were told of each
    job, and how long it took."""
    tally, told = Tally(), dict[str, Told]()
    headers = {"Authorization": f"Bearer {token}"}
    # A connection of its own to each frontend per client, as separate clients would have (one
    # shared pool of 50 connections cost httpx three times the CPU per request).
    limits = httpx.Limits(max_connections=1)
    connections = [
        [
            httpx.AsyncClient(
                base_url=url, headers=headers, timeout=REQUEST_TIMEOUT_S, limits=limits
            )
            for url in urls
        ]
        for _ in range(args.clients)
    ]
    rng = random.Random(args.seed)
    clients = [
        Client(n, mine, tally, told, random.Random(rng.random()))
        for n, mine in enumerate(connections)
    ]
    started = time.monotonic()
    deadline = started + args.seconds

    async def progress() -> None:
        while True:
            await asyncio.sleep(10)
            done = sum(tally.statuses.values())
            log(f"{done:,} requests in {time.monotonic() - started:.0f} s")

    reporter = asyncio.create_task(progress())
    try:
        await asyncio.gather(*(client.run(deadline) for client in clients))
    finally:
        reporter.cancel()
        for http in itertools.chain.from_iterable(connections):
            await http.aclose()
    return tally, told, time.monotonic() - started


async def check(region: LocalRegion, told: dict[str, Told]) -> list[str]:
    """Where the store, read through the API and directly, differs from what clients were told."""
    mismatches = []
    async with open_store(region.store_url()) as store:
        stored = {
            job.handle: job
            for job in (
                from_json(Job, kv.value, stored=True)
                for kv in (await store.range(keys.jobs_of(ENTITLEMENT))).kvs
            )
        }
    headers = {"Authorization": f"Bearer {region.token}"}
    async with httpx.AsyncClient(base_url=region.url, headers=headers, timeout=30) as http:
        for handle, expected in sorted(told.items()):
            job = stored.get(handle)
            answer = await http.get(f"/v1/jobs/{handle}", params={"consistent": "true"})
            if expected.deleted:
                if job is not None and not job.deleting:
                    mismatches.append(f"{handle}: deleted, but the store holds it undeleted")
                if answer.status_code == 200 and not answer.json()["deleting"]:
                    mismatches.append(f"{handle}: deleted, but the API shows it undeleted")
                elif answer.status_code not in (200, 404):
                    mismatches.append(f"{handle}: deleted; the API answers {answer.status_code}")
                continue
            if job is None or job.deleting or job.spec.count != expected.count:
                mismatches.append(f"{handle}: told count {expected.count}, the store holds {job}")
            if answer.status_code != 200 or answer.json()["count"] != expected.count:
                mismatches.append(f"{handle}: told count {expected.count}, API: {answer.text}")
        for handle in stored.keys() - told.keys():
            mismatches.append(f"{handle}: in the store, but no client was told it exists")
    return mismatches


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    p50, p99 = np.percentile(values, [50, 99])
    return {"p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1)}


def start(region: LocalRegion, args: argparse.Namespace) -> dict[str, int]:
    """Starts the region and makes the clients' entitlement; the pids to measure, by name."""
    region.start()
    # Ten times what the agents offer (tasks that do not fit wait unplaced), so that no
    # submission is refused for quota.
    quota = {"cpu": 10 * args.agents * 4000, "memory_mib": 10 * args.agents * 4096}
    with region.client() as admin:
        created = admin.post(
            "/v1/entitlements",
            json={"name": ENTITLEMENT, "quota": {"resources": quota}, "members": ["admin"]},
        )
        created.raise_for_status()
    pids = {**region.service_pids(), "clients": os.getpid()}
    state = region.state()
    if state.etcd_pid:
        pids["etcd"] = state.etcd_pid
    return pids


def measure_reads(region: LocalRegion, args: argparse.Namespace) -> dict[str, Any]:
    pids = start(region, args)
    handles = []
    with region.client() as admin:
        for n in range(args.jobs):
            submitted = admin.post(
                "/v1/jobs", json=sleeper_job(f"read-{n}", MAX_TASKS, entitlement=ENTITLEMENT)
            )
            submitted.raise_for_status()
            handles.append(f"{ENTITLEMENT}/read-{n}")
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    reads, elapsed = asyncio.run(
        read_load(
            region.urls,
            region.token,
            handles,
            args.clients,
            args.seconds,
            consistent=args.consistent,
            seed=args.seed,
        )
    )
    cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()}
    frontend_cpu_s = sum(seconds for name, seconds in cpu.items() if name.startswith("frontend"))
    count = len(reads.latencies_ms)
    return {
        "mode": "consistent_reads" if args.consistent else "reads",
        "jobs_read": len(handles),
        "reads": count,
        "reads_per_s": round(count / elapsed, 1),
        **{f"read_{key}": value for key, value in percentiles(reads.latencies_ms).items()},
        "frontend_cpu_ms_per_read": round(1000 * frontend_cpu_s / max(count, 1), 2),
        "errors_5xx": sum(n for status, n in reads.statuses.items() if status >= 500),
        "errors_4xx": sum(n for status, n in reads.statuses.items() if 400 <= status < 500),
        "transport_errors": dict(reads.transport_errors),
        "cpu_s": {name: seconds for name, seconds in cpu.items() if seconds >= 0.5},
    }


def measure(region: LocalRegion, args: argparse.Namespace) -> dict[str, Any]:
    pids = start(region, args)
    log(f"{args.clients} clients on {len(region.urls)} frontends for {args.seconds:.0f} s")
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    tally, told, elapsed = asyncio.run(load(region.urls, region.token, args))
    cpu = {name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()}
    log(f"checking {len(told):,} jobs against the store")
    mismatches = asyncio.run(check(region, told))
    everything = [ms for values in tally.latencies_ms.values() for ms in values]
    return {
        "requests": len(everything),
        "requests_per_s": round(len(everything) / elapsed, 1),
        **percentiles(everything),
        "errors_5xx": sum(n for status, n in tally.statuses.items() if status >= 500),
        "errors_4xx": sum(n for status, n in tally.statuses.items() if 400 <= status < 500),
        "transport_errors": dict(tally.transport_errors),
        "retried": tally.retries,
        "operations": {
            operation: {"count": len(values), **percentiles(values)}
            for operation, values in ((o, tally.latencies_ms[o]) for o in OPERATIONS)
        },
        "jobs_checked": len(told),
        "state_matches_store": not mismatches,
        "mismatches": mismatches[:5],
        "unexpected_answers": tally.unexpected[:5],
        "cpu_s": {name: seconds for name, seconds in cpu.items() if seconds >= 0.5},
    }


def main() -> None:
    stop_on_signals()
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-api-") as directory:
        region = LocalRegion(
            Path(directory) / "tether",
            store_args=["--etcd"],
            agents=args.agents,
            frontends=args.frontends,
        )
        try:
            results = measure_reads(region, args) if args.reads else measure(region, args)
        finally:
            region.cleanup()
    print(
        json.dumps(
            {
                "benchmark": "api",
                "store": "etcd",
                "frontends": args.frontends,
                "clients": args.clients,
                "seconds": args.seconds,
                **results,
            }
        )
    )


if __name__ == "__main__":
    main()
