"""The allocator deciding without a store: its index fed the synthetic region's records from
memory, and a Place that plans each job and shows the choice in the index, as a replica does
before it commits (the rest of a Place is the commit, which `bench_allocator` measures)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Final

from allocbench.jobs import JobPlan, job_record
from allocbench.region import Region, entitlement_puts, machine_puts
from tether.allocator.cache import ChoiceCache
from tether.allocator.group_commit import PlaceResult, place_tentatively
from tether.allocator.index import AllocationIndex
from tether.allocator.index.feed import Sink, sinks
from tether.allocator.placement import Planner
from tether.model import Job, from_json
from tether.store import KeyValue, Put

REPLICA: Final = "bench-0"
PAGE: Final = 1000
REVISION: Final = 1
# Place calls between two chances for the event loop to run (progress reports).
CALLS_PER_YIELD: Final = 100


def build_index(region: Region, extra: list[dict[str, Any]]) -> tuple[AllocationIndex, ChoiceCache]:
    """The index of a replica that listed the region's records, with its choice cache."""
    index = AllocationIndex()
    cache = ChoiceCache(REPLICA)
    index.listeners.append(cache)
    feeds = sinks(index)
    for sink in feeds.values():
        sink.begin_listing()
    _feed(feeds, iter(entitlement_puts(region, extra)))
    _feed(feeds, machine_puts(region))
    for sink in feeds.values():
        sink.end_listing(REVISION)
    return index, cache


def _feed(feeds: dict[str, Sink], puts: Iterator[Put]) -> None:
    """Hands `puts` to the sinks of their prefixes in pages, each page of machines before the
    page of their allocation records (puts of a prefix without a sink, host profiles, are not
    indexed)."""
    pages: dict[str, list[KeyValue]] = {prefix: [] for prefix in feeds}
    for put in puts:
        prefix = next((p for p in feeds if put.key.startswith(p)), None)
        if prefix is None:
            continue
        page = pages[prefix]
        page.append(KeyValue(put.key, put.value, REVISION, REVISION, 1))
        if len(page) >= PAGE:
            _flush(feeds, pages)
    _flush(feeds, pages)


def _flush(feeds: dict[str, Sink], pages: dict[str, list[KeyValue]]) -> None:
    for prefix, page in pages.items():  # in the sinks' order: machines before allocations
        if page:
            feeds[prefix].put_page(page)
            page.clear()


class Decider:
    """Place calls answered from the index alone: the job's record parsed (as a replica reads
    it), the allocator's Planner, and `place_tentatively`; nothing is committed, so later
    calls see earlier choices as taken, as they would once committed."""

    def __init__(self, index: AllocationIndex, cache: ChoiceCache, plans: list[JobPlan]) -> None:
        self._index = index
        self._cache = cache
        now = datetime.now(UTC).isoformat()
        self._records = {plan.handle: job_record(plan, now) for plan in plans}
        self._calls = 0

    async def place(
        self, handle: str, indexes: list[int], _generation: int, _request_id: str
    ) -> PlaceResult:
        self._calls += 1
        if self._calls % CALLS_PER_YIELD == 0:
            await asyncio.sleep(0)
        index = self._index
        job = from_json(Job, self._records[handle], stored=True)
        entitlement = index.entitlement(job.spec.entitlement)
        if entitlement is None:
            raise LookupError(f"entitlement {job.spec.entitlement} is not in the index")
        held = index.held(handle)
        pending = [task for task in indexes if task not in held]
        choice = Planner(index, self._cache, job, entitlement).choose(pending, held)
        if choice.placements:
            place_tentatively(index, job, entitlement, choice)
        ids, where = index.ids, index.held(handle)
        return PlaceResult(
            [(task, ids[where[task]]) for task in indexes if task in where],
            [(task, reason) for task, reason in choice.unplaced.items()],
            attempts=1,
            conflicts=0,
        )
