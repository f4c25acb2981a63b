"""ParSync's partitions (allocator/index/parsync.py): half-open ranges of machine ids cut at the
ids the index knows, the first from the start and the last to the end, so that every machine's
records (known or not) fall in exactly one; none when there are more partitions than machines.
And the keys that bound a partition's read, '-' in ids included."""

from __future__ import annotations

import pytest

from tests.support.allocator_builders import Region, entitlement, job, machine
from tether.allocator.group_commit import place_tentatively, see_conflict
from tether.allocator.index.parsync import PartitionedSync, just_before, stop_after
from tether.store import StoreError, keys

NOTHING = ("\x7f", "\x7f")


def bounds(machine_ids: list[str], partitions: int) -> list[tuple[str | None, str | None]]:
    region = Region().add(*(machine(machine_id) for machine_id in machine_ids))
    sync = PartitionedSync(None, region.index, period_s=1.0, partitions=partitions)  # type: ignore[arg-type]
    return [sync.bounds(partition) for partition in range(partitions)]


@pytest.mark.parametrize(
    ("machine_ids", "partitions", "expected"),
    [
        ([], 2, [(None, None), NOTHING]),
        (["m1"], 2, [(None, None), NOTHING]),
        (["a", "b", "c", "d", "e"], 2, [(None, "d"), ("d", None)]),
        (["a", "b", "c"], 4, [(None, "b"), ("b", "c"), ("c", None), NOTHING]),
        ([f"m{n}" for n in range(8)], 3, [(None, "m3"), ("m3", "m6"), ("m6", None)]),
    ],
)
def test_partitions_are_half_open_ranges_in_id_order(
    machine_ids: list[str], partitions: int, expected: list[tuple[str | None, str | None]]
) -> None:
    assert bounds(machine_ids, partitions) == expected


def test_a_partitions_read_starts_just_before_its_first_machines_records() -> None:
    start_after = just_before(keys.allocation("m10"))
    # The records of m1 (before m10) stay out; m10's own and m100's come after it.
    for before in (keys.allocation("m1"), keys.allocation_entry("m1", "ads", "web", 3)):
        assert before <= start_after
    for after in (keys.allocation("m10"), keys.allocation_entry("m10", "ads", "web", 0)):
        assert after > start_after
    assert keys.allocation("m1-x") <= start_after < keys.allocation("m10")


def test_a_partitions_read_ends_after_the_entries_of_ids_its_bound_extends() -> None:
    # Below m1-a: m1, whose entries sort after m1-a's record ('-' before '/'), and m1-0.
    stop = stop_after("m1-a")
    for below in ("m1", "m1-0"):
        assert keys.allocation_entry(below, "ads", "web", 9) <= stop
    assert keys.allocation("m1-a") <= stop, "kept out by the machine filter, not the key"
    assert keys.allocation("m2") > stop


def test_a_partition_read_leaves_alone_the_rows_a_commit_in_flight_placed_on() -> None:
    region = Region().add(machine("m1"), machine("m2"))
    owner = entitlement()
    region.entitle(owner)
    placed = job("web", count=1)
    choice = region.choose(placed, owner)
    snapshot, _ = place_tentatively(region.index, placed, owner, choice)
    [row] = snapshot.rows.tolist()
    assert row in region.index.in_flight
    sync = PartitionedSync(None, region.index, period_s=1.0, partitions=1)  # type: ignore[arg-type]
    # What the store held before the commit: nothing on either machine.
    sync.apply({"m1", "m2"}, [], region.revision)
    assert region.index.held(placed.handle) == {0: row}, "the tentative task stays"
    region.index.confirm([row], region.revision + 1)
    assert row not in region.index.in_flight


async def test_a_conflicts_read_that_fails_leaves_the_next_plan_to_the_compares() -> None:
    async def failing(machines: object) -> None:
        raise StoreError("the store went away")

    async def never(revision: int) -> None:
        raise AssertionError("a replica synced by partitions does not wait for a revision")

    await see_conflict(failing, never, ["m1"], 7)  # no exception: the Place requests go on
