"""The engine's group commit when the store fails under it (a stand-in store; unit level)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import cast

import pytest

from tests.support.allocator_builders import Region, entitlement, job, machine
from tether.allocator.engine import Engine
from tether.model import to_json
from tether.store import KeyValue, Op, Store, StoreUnavailable, keys


class FailingStore:
    """Serves the jobs' records, and fails every transaction."""

    def __init__(self, jobs: dict[str, bytes]) -> None:
        self.jobs = jobs
        self.txns = 0

    async def get(self, key: str) -> KeyValue | None:
        value = self.jobs.get(key)
        return None if value is None else KeyValue(key, value, 1, 1, 1)

    async def txn(self, compares: Sequence[object], success: Sequence[Op], failure: object) -> None:
        self.txns += 1
        await asyncio.sleep(0)
        raise StoreUnavailable("etcd is gone")


async def never_waits(_: int) -> None:
    raise AssertionError("a failed store is no conflict")


async def test_a_store_failure_fails_every_queued_place_and_leaves_the_index_clean() -> None:
    region = Region().add(*(machine(f"m{n}", memory=8192) for n in range(4)))
    region.entitle(entitlement())
    jobs = [job(f"j{n}", count=2) for n in range(5)]
    store = FailingStore({keys.job("ads", j.spec.name): to_json(j) for j in jobs})
    engine = Engine(
        cast(Store, store),
        region.index,
        max_attempts=10,
        idle_return_s=300,
        writer="test",
        caught_up=never_waits,
        resources_caught_up=never_waits,
    )
    results = await asyncio.gather(
        *(engine.place(j.handle, [0, 1], 1, "") for j in jobs), return_exceptions=True
    )
    assert all(isinstance(result, StoreUnavailable) for result in results), results
    assert store.txns >= 1
    # Nothing tentative stays behind: no task held, no resource used, no machine owned.
    assert all(region.index.placements(j.handle) == {} for j in jobs)
    assert not region.index.used.any()
    assert not region.index.owned_rows(region.index.owners.find("ads"))
    await engine.close()
    # The next Place runs again (and fails again, rather than hanging).
    with pytest.raises(StoreUnavailable):
        await engine.place(jobs[0].handle, [0], 1, "")
