"""bench_api --reads: clients that only read jobs, answered from the frontends' caches (or, with
--consistent, from the store), and what a read costs the frontends."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from benchkit import log

from apibench.rawhttp import RawClient

READ_TIMEOUT_S = 30.0


@dataclass
class Reads:
    """Every read's latency and status."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)


async def _reader(
    frontends: list[RawClient],
    paths: list[str],
    consistent: bool,
    rng: random.Random,
    deadline: float,
    reads: Reads,
) -> None:
    query = "?consistent=true" if consistent else ""
    turn = rng.randrange(len(frontends))
    while time.monotonic() < deadline:
        http = frontends[turn % len(frontends)]
        turn += 1
        started = time.perf_counter()
        try:
            status = await http.get(rng.choice(paths) + query)
        except (OSError, TimeoutError) as error:
            reads.transport_errors[type(error).__name__] += 1
            continue
        reads.latencies_ms.append((time.perf_counter() - started) * 1000)
        reads.statuses[status] += 1


async def read_load(
    urls: list[str],
    token: str,
    handles: list[str],
    clients: int,
    seconds: float,
    *,
    consistent: bool,
    seed: int,
) -> tuple[Reads, float]:
    """`clients` readers for `seconds`, each GETting one of `handles` (the job, or its tasks)
    after another from the next frontend; what they saw and how long it took."""
    paths = [
        path for handle in handles for path in (f"/v1/jobs/{handle}", f"/v1/jobs/{handle}/tasks")
    ]
    headers = {"Authorization": f"Bearer {token}"}
    connections = [
        [RawClient(url, headers, READ_TIMEOUT_S) for url in urls] for _ in range(clients)
    ]
    reads = Reads()
    rng = random.Random(seed)
    started = time.monotonic()
    log(f"{clients} readers on {len(urls)} frontends for {seconds:.0f} s")
    try:
        await asyncio.gather(
            *(
                _reader(
                    mine, paths, consistent, random.Random(rng.random()), started + seconds, reads
                )
                for mine in connections
            )
        )
    finally:
        for mine in connections:
            for http in mine:
                http.close()
    return reads, time.monotonic() - started
