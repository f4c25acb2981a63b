"""`bench_region`'s scale mode, from outside the region: the machines coming up, the jobs
submitted through REST, and the tasks that run, followed through a watch."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import time
from collections import Counter
from typing import Any

import httpx
import orjson

from benchkit import available_mib, log
from tether.config import StoreSettings
from tether.store import EventType, Store, keys, open_store

SUBMITTING_AT_ONCE = 16
SUBMIT_ATTEMPTS = 10
# A quarter of a simulated machine's CPU and an eighth of its memory each way: 100,000 tasks
# fill 6,250 of 10,000 machines when packed.
TASK_RESOURCES = {"cpu": 2000, "memory_mib": 4096}
QUOTA_HEADROOM = 1.2


async def machines_up(store: Store) -> int:
    """How many machines are up, read page by page."""
    up, start_after = 0, None
    while True:
        page = await store.range(keys.MACHINES, start_after=start_after, limit=5000)
        up += sum(1 for kv in page.kvs if orjson.loads(kv.value)["state"] == "up")
        if not page.more or not page.kvs:
            return up
        start_after = page.kvs[-1].key


async def wait_for_machines(
    settings: StoreSettings, machines: int, simulator: subprocess.Popen[bytes], floor_mib: float
) -> None:
    async with open_store(settings=settings) as store:
        reported = -1
        while (up := await machines_up(store)) < machines:
            if simulator.poll() is not None:
                raise SystemExit(f"tether agent-sim exited with code {simulator.returncode}")
            if (available := available_mib()) < floor_mib:
                raise SystemExit(
                    f"gave up with {up:,} of {machines:,} machines up: {available:,.0f} MiB "
                    f"of memory available, below --min-available-mib {floor_mib:g}"
                )
            if up // 1000 != reported // 1000:
                log(f"{up:,} of {machines:,} machines up")
                reported = up
            # Each look reads and parses every machine: at 100,000 machines, once every 20 s.
            await asyncio.sleep(max(2.0, machines / 5000))


class Running:
    """Tasks whose status says running, followed through a watch on `task-status/`."""

    def __init__(self) -> None:
        self.tasks: set[str] = set()
        self._changed = asyncio.Event()

    async def follow(self, store: Store, start_revision: int) -> None:
        async with store.watch(keys.TASK_STATUS, start_revision=start_revision) as watch:
            async for events in watch:
                for event in events:
                    put = event.type is EventType.PUT
                    if put and orjson.loads(event.kv.value)["state"] == "running":
                        self.tasks.add(event.kv.key)
                    else:
                        self.tasks.discard(event.kv.key)
                self._changed.set()

    async def pending_at_most(self, submitted: int, limit: int) -> None:
        """Returns once at most `limit` of `submitted` tasks do not run yet."""
        while submitted - len(self.tasks) > limit:
            self._changed.clear()
            await self._changed.wait()

    async def wait_for(self, count: int, deadline: float) -> None:
        """Returns once `count` tasks run or at `deadline` (monotonic)."""
        while len(self.tasks) < count and time.monotonic() < deadline:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):
                    await self._changed.wait()

    async def report(self, started: float, every_s: float = 10.0) -> None:
        """Logs how many tasks run, and the rate since `started` (monotonic), every `every_s`
        until cancelled: submission and start overlap when the submitter paces itself."""
        while True:
            await asyncio.sleep(every_s)
            elapsed, running = time.monotonic() - started, len(self.tasks)
            log(f"{running:,} tasks run after {elapsed:.0f} s ({running / elapsed:,.0f}/s)")


async def create_entitlements(http: httpx.AsyncClient, tasks: Counter[str]) -> None:
    """Each entitlement with the quota for its `tasks` and some headroom."""
    for name, count in tasks.items():
        quota = {
            resource: int(amount * count * QUOTA_HEADROOM)
            for resource, amount in TASK_RESOURCES.items()
        }
        created = await http.post(
            "/v1/entitlements",
            json={"name": name, "quota": {"resources": quota}, "members": ["admin"]},
        )
        created.raise_for_status()


async def submit(
    frontends: list[httpx.AsyncClient],
    jobs: list[dict[str, Any]],
    running: Running,
    max_pending: int | None,
) -> int:
    """Submits every job in order, SUBMITTING_AT_ONCE in flight, each to the next frontend, and
    with `max_pending` no job while more than that many submitted tasks do not run yet. A job
    the region could not take (503: its store did not answer in time) or whose answer was lost
    (the connection broke) is sent again with the same Idempotency-Key, which makes that
    safe. Returns how many were sent again."""
    slots = asyncio.Semaphore(SUBMITTING_AT_ONCE)
    targets = itertools.cycle(frontends)
    retried = 0

    async def one(job: dict[str, Any]) -> None:
        nonlocal retried
        headers = {"Idempotency-Key": job["name"]}
        problem = ""
        try:
            for _ in range(SUBMIT_ATTEMPTS):
                try:
                    response = await next(targets).post("/v1/jobs", json=job, headers=headers)
                except httpx.TransportError as error:
                    problem = repr(error)
                else:
                    if response.status_code in (200, 201):
                        return
                    problem = f"{response.status_code} {response.text}"
                    if response.status_code != 503:
                        break
                retried += 1
                log(f"sending {job['name']} again after {problem[:200]}")
                await asyncio.sleep(1)
        finally:
            slots.release()
        raise SystemExit(f"submitting {job['name']}: {problem}")

    sending, submitted = [], 0
    for job in jobs:
        submitted += job["count"]
        if max_pending is not None:
            await running.pending_at_most(submitted, max_pending)
        await slots.acquire()
        sending.append(asyncio.create_task(one(job)))
    await asyncio.gather(*sending)
    return retried
