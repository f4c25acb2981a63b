"""Partitioned state sync (ParSync): the index's allocation records refreshed one partition of
machines at a time, round robin, on a period, instead of followed through a watch.

A partition is a contiguous range of machine ids (so one paged range read of `allocations/`
covers it): the machines the index knows, sorted, cut into `partitions` slices. Every
`period_s / partitions` the next partition is read at one revision and made exactly what was
read, unless this replica committed on a machine since (its own commits are in the index at
once). Staleness is then spread evenly: each machine's records are at most `period_s` old, as
with a one-shot sync of everything every `period_s` (`partitions=1`), but only a slice goes
stale together. After a conflict, the machines the commit touched are read at once (`refresh`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.aio import cancel_and_wait
from tether.store import Get, KeyValue, Store, StoreError, keys

if TYPE_CHECKING:
    from tether.allocator.index.index import AllocationIndex

_log = logging.getLogger(__name__)

_PAGE = 5_000
_MACHINES_PER_READ = 60
"""Machines one refresh transaction reads (two reads each: etcd allows 128 by default)."""
_RETRY_S = 0.5
_NOTHING = "\x7f"
"""A machine id after every other (ids are ASCII names): the bounds of an empty partition."""


class PartitionedSync:
    """Feeds `allocations/` into the index partition by partition (see the module)."""

    def __init__(
        self, store: Store, index: AllocationIndex, *, period_s: float, partitions: int
    ) -> None:
        self._store = store
        self._index = index
        self.period_s = period_s
        self.partitions = partitions
        self.read_at = [0] * partitions
        """The revision each partition was last read at."""
        self.refreshes = 0
        self._next = 0
        self._advanced = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @property
    def revision(self) -> int:
        """The revision every partition has been read at, at least."""
        return min(self.read_at)

    async def start(self) -> None:
        """Reads every partition once, then refreshes one every `period_s / partitions`."""
        for partition in range(self.partitions):
            await self._refresh_partition(partition)
        self._task = asyncio.create_task(self._cycle(), name="parsync allocations/")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def wait_for(self, revision: int) -> None:
        """Returns once every partition has been read at `revision` or later (within a cycle
        of `period_s`)."""
        async with self._advanced:
            await self._advanced.wait_for(lambda: self.revision >= revision)

    async def refresh(self, machine_ids: Sequence[str]) -> None:
        """Reads the machines' records and entries now (after a conflict on them)."""
        kvs: list[KeyValue] = []
        revision = 0
        for start in range(0, len(machine_ids), _MACHINES_PER_READ):
            chunk = machine_ids[start : start + _MACHINES_PER_READ]
            ops = [
                op
                for machine_id in chunk
                for op in (
                    Get(keys.allocation(machine_id)),
                    Get(keys.allocation_entries(machine_id), prefix=True),
                )
            ]
            result = await self._store.txn([], ops)
            kvs += [kv for position in range(len(ops)) for kv in result.kvs(position)]
            # Chunks read at different revisions: applied as of the first, so that a row
            # written since is not taken for one this replica wrote after the read.
            revision = revision or result.revision
        self.apply(set(machine_ids), kvs, revision)

    async def _cycle(self) -> None:
        pause_s = self.period_s / self.partitions
        while True:
            await asyncio.sleep(pause_s)
            self._next = (self._next + 1) % self.partitions
            try:
                await self._refresh_partition(self._next)
            except StoreError as error:
                _log.warning("parsync: reading partition %d failed: %s", self._next, error)
                await asyncio.sleep(_RETRY_S)
            except Exception:
                # The index would go stale for good, and every wait for a revision with it.
                _log.exception("parsync: reading partition %d failed", self._next)
                await asyncio.sleep(_RETRY_S)

    def bounds(self, partition: int) -> tuple[str | None, str | None]:
        """The partition's machine ids: from the first (None: from the start) up to, not
        including, the next partition's first (None: to the end). An id the index does not know
        falls in the one whose range holds it; one past the machines (more partitions than
        machines) holds none."""
        ids = sorted(self._index.machines_present())
        size = max(1, -(-len(ids) // self.partitions))
        start, end = partition * size, (partition + 1) * size
        if partition and start >= len(ids):
            return _NOTHING, _NOTHING
        first = None if partition == 0 else ids[start]
        upper = None if end >= len(ids) else ids[end]
        return first, upper

    async def _refresh_partition(self, partition: int) -> None:
        first, upper = self.bounds(partition)

        def inside(machine_id: str) -> bool:
            return within(first, upper, machine_id)

        # Keys sort as machine ids do but for '-', which sorts before '/': the entries of `m1`
        # come after the record of `m1-a`. The range starts at the first machine's record and
        # ends after the entries of every machine before `upper` (`stop_after`); what it holds
        # of machines outside is dropped.
        start_after = None if first is None else just_before(keys.allocation(first))
        stop = None if upper is None else stop_after(upper)
        kvs: list[KeyValue] = []
        revision = 0
        while True:
            page = await self._store.range(
                keys.ALLOCATIONS, start_after=start_after, limit=_PAGE, revision=revision
            )
            revision = page.revision
            in_range = [kv for kv in page.kvs if stop is None or kv.key <= stop]
            kvs += [kv for kv in in_range if inside(_machine(kv))]
            if not page.more or len(in_range) < len(page.kvs) or not page.kvs:
                break
            start_after = page.kvs[-1].key
        index = self._index
        machines = {m for m in index.machines_present() if inside(m)}
        machines |= {_machine(kv) for kv in kvs}
        machines |= {
            n.partition("/")[0] for n in index.records_present() if inside(n.partition("/")[0])
        }
        self.apply(machines, kvs, revision)
        self.refreshes += 1
        async with self._advanced:
            self.read_at[partition] = revision
            self._advanced.notify_all()

    def apply(self, machines: set[str], kvs: Sequence[KeyValue], revision: int) -> None:
        """Makes the machines' records and entries in the index what `kvs` (read at
        `revision`) hold, but for machines this replica committed on after `revision`, or has
        a commit in flight on."""
        index = self._index
        row_of, in_flight = index.row_of, index.in_flight
        fresh = {
            machine_id
            for machine_id in machines
            if machine_id not in row_of
            or (
                int(index.revision[row_of[machine_id]]) <= revision
                and row_of[machine_id] not in in_flight
            )
        }
        read = [kv for kv in kvs if _machine(kv) in fresh]
        index.set_allocations(read)
        names = {kv.key[len(keys.ALLOCATIONS) :] for kv in read}
        for name in index.records_present():
            if name.partition("/")[0] in fresh and name not in names:
                index.set_allocation(name, None, revision)


def _machine(kv: KeyValue) -> str:
    return keys.split_allocation(kv.key)[0]


def within(first: str | None, upper: str | None, machine_id: str) -> bool:
    """Whether the machine id falls in the partition `bounds` gave as (first, upper)."""
    return (first is None or machine_id >= first) and (upper is None or machine_id < upper)


def stop_after(upper: str) -> str:
    """A key at or after every key of every machine id below `upper`. Such ids' keys sort below
    `upper`'s, but for the entries of ids that `upper` extends with '-' (`m1/...` sorts after
    `m1-a`, as '-' sorts before '/'): those all sort before the entries of `upper`'s part
    before its first '-', followed by DEL."""
    return keys.allocation_entries(upper.split("-")[0]) + "\x7f"


def just_before(key: str) -> str:
    """A key after every key that sorts before `key` and is not under it, and before `key`:
    `key` with its last character one lower and DEL appended (machine ids are ASCII names)."""
    return key[:-1] + chr(ord(key[-1]) - 1) + "\x7f"
