"""Helpers of the fault tests (tests/e2e/test_faults_*.py): jobs over REST, processes, and the
store as the region sees it."""

from __future__ import annotations

import asyncio

import httpx

from tether.region.harness import LocalRegion, tasks_of
from tether.region.supervisor import process_alive
from tether.store import KeyValue, keys, open_store


def pids_by_index(client: httpx.Client, handle: str) -> dict[int, int | None]:
    return {t["index"]: t["pid"] for t in tasks_of(client, handle)}


def dead_services(region: LocalRegion, pids: dict[str, int]) -> list[str]:
    """The services of `pids` (name -> pid) that no longer run, and `tether up` if it exited."""
    dead = [name for name, pid in pids.items() if not process_alive(pid)]
    if region.process is None or region.process.poll() is not None:
        dead.append("tether up")
    return dead


def read_key(url: str, key: str) -> KeyValue | None:
    """`key` as the store at `url` holds it now."""

    async def read() -> KeyValue | None:
        async with open_store(url) as store:
            return await store.get(key)

    return asyncio.run(read())


def machine_versions(url: str) -> dict[str, int]:
    """Machine id -> version of its record in the store at `url`.

    A machine's state changes only by a write of its record (the health checker's, the
    broker's): a machine that went down, even for a moment, has a higher version afterwards.
    """

    async def read() -> dict[str, int]:
        async with open_store(url) as store:
            listed = await store.range(keys.MACHINES)
        return {keys.last_segment(kv.key): kv.version for kv in listed.kvs}

    return asyncio.run(read())
