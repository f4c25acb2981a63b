"""The allocator deciding without a store: its index fed the synthetic region's records from
memory, and a Place that plans each job and shows the choice in the index, as a replica does
before it commits (the rest of a Place is the commit, which `bench_allocator` measures)."""

from __future__ import annotations

import asyncio
import bisect
from datetime import UTC, datetime
from typing import Any, Final

from allocbench.jobs import JobPlan, job_record
from allocbench.region import Region, entitlement_puts, machine_puts
from tether.allocator.cache import ChoiceCache
from tether.allocator.group_commit import PlaceResult, place_tentatively
from tether.allocator.index import AllocationIndex
from tether.allocator.index.feed import sinks
from tether.allocator.placement import Planner
from tether.model import Job, from_json
from tether.store import KeyValue
from tether.store.base import prefix_end

REPLICA: Final = "bench-0"
PAGE: Final = 1000
REVISION: Final = 1
# Place calls between two chances for the event loop to run (progress reports).
CALLS_PER_YIELD: Final = 100


def region_records(region: Region, extra: list[dict[str, Any]]) -> list[KeyValue]:
    """The records a replica would list from the store of `region` (with `extra` entitlements),
    in key order per prefix as a listing brings them: what the index is built from."""
    puts = [*entitlement_puts(region, extra), *machine_puts(region)]
    records = [KeyValue(put.key, put.value, REVISION, REVISION, 1) for put in puts]
    records.sort(key=lambda record: record.key)
    return records


def build_index(records: list[KeyValue]) -> tuple[AllocationIndex, ChoiceCache]:
    """The index of a replica that listed `records`, with its choice cache: each prefix fed to
    its sink in pages, in the order the replica's feeds list them (records of a prefix without
    a sink, host profiles, are not indexed)."""
    index = AllocationIndex()
    cache = ChoiceCache(REPLICA)
    index.listeners.append(cache)
    for prefix, sink in sinks(index).items():
        start = bisect.bisect_left(records, prefix, key=lambda record: record.key)
        end = bisect.bisect_left(
            records, prefix_end(prefix).decode(), key=lambda record: record.key
        )
        sink.begin_listing()
        for page in range(start, end, PAGE):
            sink.put_page(records[page : min(page + PAGE, end)])
        sink.end_listing(REVISION)
    return index, cache


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
