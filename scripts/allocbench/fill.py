"""One allocator filling its share of the region with Place calls in flight, and timing them."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from benchkit import log

from allocbench.jobs import JobPlan
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.store import open_store

GENERATION: Final = 1
# Long enough for any share of a million-machine fill; a crashed worker aborts the barrier.
BARRIER_TIMEOUT_S: Final = 6 * 3600.0
REASONS_KEPT: Final = 10
# A fill whose last STALL_CALLS Place calls raised it by less than STALL_GAIN has stalled (the
# free pool and quotas are used up): it ends there instead of running the stream dry.
STALL_CALLS: Final = 10_000
STALL_GAIN: Final = 0.002
REASON_CHARS: Final = 200

Sync = Callable[[], Awaitable[None]]
"""Returns once every allocator of the benchmark has called it (a barrier)."""


class Barrier(Protocol):
    """The part of multiprocessing's Barrier the workers use."""

    def wait(self, timeout: float | None = None) -> int: ...

    def abort(self) -> None: ...


class Results(Protocol):
    """Where a worker process puts its statistics (a multiprocessing queue)."""

    def put(self, item: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class Share:
    """What one allocator does: its part of the job stream and of the region's capacity."""

    store_url: str
    worker: int
    jobs: list[JobPlan]
    cpu: float
    """Its part of the region's CPU capacity (millicores); `fill` of it ends its fill."""
    memory_mib: float
    fill: float
    large_fill: float
    """The fill at which the large job is placed."""
    large: JobPlan | None
    concurrency: int


@dataclass(slots=True)
class Filler:
    """Keeps `concurrency` Place calls in flight and counts what they place."""

    place: Callable[[str, list[int], int, str], Awaitable[Any]]
    share: Share
    cpu: int = 0
    memory_mib: int = 0
    calls: int = 0
    complete: int = 0
    """Calls that placed every task of their job."""
    tasks_placed: int = 0
    unplaced: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    attempts: int = 0
    conflicts: int = 0
    busy_s: float = 0.0
    stalled: bool = False
    checkpoints: deque[tuple[int, float]] = field(default_factory=deque)
    """(calls, fraction) every STALL_CALLS / 10 calls, the last STALL_CALLS' worth."""

    def fraction(self) -> float:
        """The higher of the CPU and memory fill of this allocator's part of the region."""
        return max(self.cpu / self.share.cpu, self.memory_mib / self.share.memory_mib)

    async def run_until(self, jobs: Iterator[JobPlan], fraction: float) -> None:
        """Places jobs from `jobs` until the fill reaches `fraction` or the stream ends, then
        waits for the calls in flight."""
        started = time.perf_counter()

        async def caller() -> None:
            while self.fraction() < fraction and not self._stalling():
                plan = next(jobs, None)
                if plan is None:
                    return
                await self.regular(plan)

        await asyncio.gather(*(caller() for _ in range(self.share.concurrency)))
        self.busy_s += time.perf_counter() - started

    def _stalling(self) -> bool:
        if self.calls - (self.checkpoints[-1][0] if self.checkpoints else 0) >= STALL_CALLS // 10:
            self.checkpoints.append((self.calls, self.fraction()))
            while self.calls - self.checkpoints[0][0] > STALL_CALLS:
                self.checkpoints.popleft()
            first_calls, first_fraction = self.checkpoints[0]
            if self.calls - first_calls >= STALL_CALLS * 9 // 10:
                self.stalled = self.fraction() - first_fraction < STALL_GAIN
        return self.stalled

    async def call(self, plan: JobPlan) -> tuple[int, float]:
        """Places every task of `plan`; returns (tasks placed, seconds)."""
        started = time.perf_counter()
        try:
            result = await self.place(
                plan.handle, list(range(plan.count)), GENERATION, f"bench/{plan.handle}"
            )
        except Exception as error:  # one failing call must not end a long benchmark
            self.errors[f"{type(error).__name__}: {error}"[:REASON_CHARS]] += 1
            self.unplaced[f"error: {type(error).__name__}"] += plan.count
            return 0, time.perf_counter() - started
        seconds = time.perf_counter() - started
        placed = len(result.placements)
        self.cpu += placed * plan.shape.cpu
        self.memory_mib += placed * plan.shape.memory_mib
        self.attempts += result.attempts
        self.conflicts += result.conflicts
        for _, reason in result.unplaced:
            self.unplaced[reason[:REASON_CHARS]] += 1
        return placed, seconds

    async def regular(self, plan: JobPlan) -> None:
        placed, seconds = await self.call(plan)
        self.calls += 1
        self.complete += placed == plan.count
        self.tasks_placed += placed
        self.latencies_ms.append(seconds * 1000)


def peak_rss_mib() -> float:
    """This process's peak resident set size (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def run_allocator(share: Share, sync: Sync) -> dict[str, Any]:
    """Builds an allocator on the store, fills its share (the large job at `large_fill`), and
    returns its statistics as JSON-ready values."""
    settings = AllocatorSettings(id=f"bench-{share.worker}", host="127.0.0.1", port=0)
    allocator = Allocator(open_store(share.store_url), settings)
    started = time.perf_counter()
    await allocator.start()
    build_s = time.perf_counter() - started
    log(f"allocator {share.worker}: index built in {build_s:.1f} s")
    try:
        engine = allocator.engine
        results = await fill_share(Filler(engine.place, share), sync)
        stats = engine.stats
    finally:
        await allocator.stop()
    return results | {
        "build_s": build_s,
        "transactions": stats.attempts,
        "failed_transactions": stats.conflicts,
        "cache_hits": stats.cache_hits,
        "cache_misses": stats.cache_misses,
    }


async def fill_share(filler: Filler, sync: Sync) -> dict[str, Any]:
    """Fills the filler's share, the large job alone at `large_fill`; its statistics."""
    share = filler.share
    large_tasks, large_s = 0, 0.0
    jobs = iter(share.jobs)
    await sync()
    await _fill(filler, jobs, share.large_fill, share.worker)
    await sync()
    if share.large is not None:
        log(f"allocator {share.worker}: placing the large job ({share.large.count} tasks)")
        large_tasks, large_s = await filler.call(share.large)
    await sync()
    await _fill(filler, jobs, share.fill, share.worker)
    return {
        "worker": share.worker,
        "rss_mib": peak_rss_mib(),
        "fill_s": filler.busy_s,
        "calls": filler.calls,
        "complete": filler.complete,
        "jobs_left": sum(1 for _ in jobs),
        "stalled": filler.stalled,
        "tasks_placed": filler.tasks_placed,
        "cpu": filler.cpu,
        "memory_mib": filler.memory_mib,
        "unplaced": dict(filler.unplaced),
        "errors": dict(filler.errors.most_common(REASONS_KEPT)),
        "latencies_ms": filler.latencies_ms,
        "attempts": filler.attempts,
        "conflicts": filler.conflicts,
        "large_job_tasks": large_tasks,
        "large_job_s": large_s,
    }


async def _fill(filler: Filler, jobs: Iterator[JobPlan], fraction: float, worker: int) -> None:
    # Reports progress every few percent while the callers run.
    reporter = asyncio.create_task(_report(filler, worker))
    try:
        await filler.run_until(jobs, fraction)
    finally:
        reporter.cancel()
    log(f"allocator {worker}: {filler.fraction():.0%} full after {filler.calls:,} jobs")


async def _report(filler: Filler, worker: int) -> None:
    while True:
        await asyncio.sleep(5)
        log(f"allocator {worker}: {filler.fraction():.0%} full, {filler.calls:,} jobs")


async def no_one_else() -> None:
    """The barrier of a benchmark with a single allocator."""


async def run_single(share: Share) -> dict[str, Any]:
    """The one allocator of `--allocators 1`, in the benchmark's own process."""
    return await run_allocator(share, no_one_else)


def worker_main(share: Share, barrier: Barrier, results: Results) -> None:
    """A worker process of `--allocators N`: its statistics, or its error, go to `results`."""

    async def sync() -> None:
        await asyncio.to_thread(barrier.wait, BARRIER_TIMEOUT_S)

    try:
        results.put(asyncio.run(run_allocator(share, sync)))
    except BaseException as error:
        # The others would wait for this one at the barrier for hours.
        barrier.abort()
        results.put({"worker": share.worker, "error": f"{type(error).__name__}: {error}"})
        raise
