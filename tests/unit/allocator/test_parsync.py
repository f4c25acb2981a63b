"""ParSync's partitions (allocator/index/parsync.py): contiguous ranges of the machine ids the
index knows, the first from the start of the keyspace and the last to its end, so that every
machine's records are read in some partition; none when there are more partitions than
machines."""

from __future__ import annotations

import pytest

from tests.support.allocator_builders import Region, machine
from tether.allocator.index.parsync import PartitionedSync, just_before
from tether.store import keys

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
        (["a", "b", "c", "d", "e"], 2, [(None, "c"), ("d", None)]),
        (["a", "b", "c"], 4, [(None, "a"), ("b", "b"), ("c", None), NOTHING]),
        ([f"m{n}" for n in range(8)], 3, [(None, "m2"), ("m3", "m5"), ("m6", None)]),
    ],
)
def test_partitions_cover_every_machine_once_in_id_order(
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
