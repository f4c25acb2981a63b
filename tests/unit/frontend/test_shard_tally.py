"""The shard tally and its feed sinks: counts follow creates, rewrites, moves and deletes, a
listing again replaces them, and after any sequence they equal a count from scratch."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.frontend.shard_tally import Held, KeyCount, OwnedMachines, ShardMap, ShardTally
from tether.model import Allocation, Resources, to_json
from tether.store import KeyValue, keys
from tether.store.feed import FeedSink

ENTITLEMENTS = ("ads", "ml", "web")
SHARDS = ("shard-0", "shard-1")
COUNTED = ((keys.JOBS, "jobs"), (keys.TASKS, "tasks"), (keys.OPERATIONS, "operations"))


@dataclass
class Keyspace:
    """A store's keys as a watch reports them to the tally's sinks: a put carries the key's
    version, a delete comes only for a key that exists, and `relist` lists a prefix anew."""

    tally: ShardTally = field(default_factory=ShardTally)
    values: dict[str, KeyValue] = field(default_factory=dict)
    revision: int = 0
    sinks: dict[str, FeedSink] = field(init=False)

    def __post_init__(self) -> None:
        self.sinks = {
            keys.SHARD_MAP: ShardMap(self.tally),
            keys.JOBS: KeyCount(keys.JOBS, "jobs", self.tally),
            keys.TASKS: KeyCount(keys.TASKS, "tasks", self.tally),
            keys.OPERATIONS: KeyCount(keys.OPERATIONS, "operations", self.tally),
            keys.ALLOCATIONS: OwnedMachines(self.tally),
        }

    def _sink(self, key: str) -> FeedSink:
        return next(sink for prefix, sink in self.sinks.items() if key.startswith(prefix))

    def put(self, key: str, value: bytes) -> None:
        self.revision += 1
        old = self.values.get(key)
        kv = KeyValue(
            key,
            value,
            create_revision=old.create_revision if old else self.revision,
            mod_revision=self.revision,
            version=old.version + 1 if old else 1,
        )
        self.values[key] = kv
        self._sink(key).put(kv)

    def delete(self, key: str) -> None:
        if self.values.pop(key, None) is not None:
            self.revision += 1
            self._sink(key).delete(key, self.revision)

    def relist(self, prefix: str, page: int = 2) -> None:
        sink = self.sinks[prefix]
        listed = sorted(
            (kv for key, kv in self.values.items() if key.startswith(prefix)),
            key=lambda kv: kv.key,
        )
        sink.begin_listing()
        for start in range(0, len(listed), page):
            sink.put_page(listed[start : start + page])
        sink.end_listing(self.revision)

    def from_scratch(self, shard: str) -> Held:
        """What the shard holds, counted from the keys alone."""
        shard_of = {
            keys.last_segment(key): kv.value.decode()
            for key, kv in self.values.items()
            if key.startswith(keys.SHARD_MAP)
        }
        counted: Counter[str] = Counter()
        for key, kv in self.values.items():
            if key.startswith(keys.ALLOCATIONS):
                _, task = keys.split_allocation(key)
                owner = None if task else Allocation.model_validate_json(kv.value).entitlement
                if owner is not None and shard_of.get(owner) == shard:
                    counted["machines"] += 1
            for prefix, kind in COUNTED:
                if (
                    key.startswith(prefix)
                    and shard_of.get(key[len(prefix) :].split("/")[0]) == shard
                ):
                    counted[kind] += 1
        return Held(
            tuple(sorted(ent for ent, on in shard_of.items() if on == shard)),
            counted["jobs"],
            counted["tasks"],
            counted["operations"],
            counted["machines"],
        )

    def check(self) -> None:
        for shard in SHARDS:
            assert self.tally.held(shard) == self.from_scratch(shard), shard


def owned_by(machine: str, owner: str | None) -> bytes:
    return to_json(Allocation(machine=machine, entitlement=owner))


def test_a_key_counts_once_however_often_it_is_rewritten_and_leaves_with_its_deletion() -> None:
    space = Keyspace()
    space.put(keys.shard_assignment("ads"), b"shard-0")
    for _ in range(3):
        space.put(keys.task("ads", "web", 0), b"{}")
    space.put(keys.task("ads", "web", 1), b"{}")
    space.put(keys.job("ads", "web"), b"{}")
    space.put(keys.operation("ads", "web", "op-1"), b"{}")
    assert space.tally.held("shard-0") == Held(("ads",), jobs=1, tasks=2, operations=1)
    space.delete(keys.task("ads", "web", 0))
    space.delete(keys.operation("ads", "web", "op-1"))
    assert space.tally.held("shard-0") == Held(("ads",), jobs=1, tasks=1)


def test_a_move_carries_the_entitlements_counts_and_an_unmapped_one_counts_nowhere() -> None:
    space = Keyspace()
    # Counted before the entitlement is in the map: they join its shard with it.
    space.put(keys.task("ads", "web", 0), b"{}")
    space.put(keys.allocation("m1"), owned_by("m1", "ads"))
    assert space.tally.held("shard-0") == Held()
    space.put(keys.shard_assignment("ads"), b"shard-0")
    assert space.tally.held("shard-0") == Held(("ads",), tasks=1, machines=1)
    space.put(keys.shard_assignment("ads"), b"shard-1")
    assert space.tally.held("shard-0") == Held()
    assert space.tally.held("shard-1") == Held(("ads",), tasks=1, machines=1)
    space.delete(keys.shard_assignment("ads"))
    assert space.tally.held("shard-1") == Held()


def test_machines_follow_their_records_owner_and_entries_count_for_nothing() -> None:
    space = Keyspace()
    space.put(keys.shard_assignment("ads"), b"shard-0")
    space.put(keys.shard_assignment("ml"), b"shard-1")
    space.put(keys.allocation("m1"), owned_by("m1", None))
    space.put(keys.allocation_entry("m1", "ads", "web", 0), to_json(Resources(cpu=1)))
    assert space.tally.held("shard-0").machines == 0
    space.put(keys.allocation("m1"), owned_by("m1", "ads"))
    space.put(keys.allocation("m1"), owned_by("m1", "ads"))
    assert space.tally.held("shard-0").machines == 1
    space.put(keys.allocation("m1"), owned_by("m1", "ml"))
    assert (space.tally.held("shard-0").machines, space.tally.held("shard-1").machines) == (0, 1)
    space.delete(keys.allocation("m1"))
    assert space.tally.held("shard-1").machines == 0


def test_an_unreadable_allocation_record_counts_as_unowned_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    space = Keyspace()
    space.put(keys.shard_assignment("ads"), b"shard-0")
    space.put(keys.allocation("m1"), owned_by("m1", "ads"))
    with caplog.at_level(logging.WARNING):
        space.put(keys.allocation("m1"), b'{"machine": "m1", "entitlement": 7}')
    assert space.tally.held("shard-0").machines == 0
    assert "machine m1: unreadable allocation record" in caplog.text


def test_a_listing_again_replaces_the_counts_instead_of_adding_to_them() -> None:
    space = Keyspace()
    space.put(keys.shard_assignment("ads"), b"shard-0")
    space.put(keys.task("ads", "web", 0), b"{}")
    space.put(keys.allocation("m1"), owned_by("m1", "ads"))
    for prefix in space.sinks:
        space.relist(prefix)
        space.relist(prefix)
    assert space.tally.held("shard-0") == Held(("ads",), tasks=1, machines=1)
    # What a listing no longer finds (deleted while the watch was compacted away) is gone.
    del space.values[keys.task("ads", "web", 0)]
    space.values[keys.shard_assignment("ads")] = KeyValue(
        keys.shard_assignment("ads"), b"shard-1", 1, space.revision, 2
    )
    space.relist(keys.TASKS)
    space.relist(keys.SHARD_MAP)
    assert space.tally.held("shard-0") == Held()
    assert space.tally.held("shard-1") == Held(("ads",), machines=1)


NAMES = st.sampled_from(ENTITLEMENTS)
INDEX = st.integers(0, 3)
CHANGES = st.one_of(
    st.tuples(st.just("map"), NAMES, st.sampled_from((*SHARDS, None))),
    st.tuples(st.just("job"), NAMES, st.booleans()),
    st.tuples(st.just("task"), NAMES, INDEX, st.booleans()),
    st.tuples(st.just("operation"), NAMES, INDEX, st.booleans()),
    st.tuples(st.just("owner"), INDEX, st.sampled_from((*ENTITLEMENTS, None, "gone"))),
    st.tuples(st.just("entry"), INDEX, NAMES, st.booleans()),
    st.tuples(st.just("relist"), st.sampled_from(sorted(Keyspace().sinks))),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(CHANGES, max_size=60))
def test_after_any_changes_every_shard_holds_what_a_count_from_scratch_finds(
    changes: list[tuple[object, ...]],
) -> None:
    space = Keyspace()
    for change in changes:
        match change:
            case ("map", str(ent), shard):
                key = keys.shard_assignment(ent)
                space.put(key, shard.encode()) if isinstance(shard, str) else space.delete(key)
            case ("job", str(ent), bool(present)):
                key = keys.job(ent, "web")
                space.put(key, b"{}") if present else space.delete(key)
            case ("task" | "operation" as kind, str(ent), int(index), bool(present)):
                key = (
                    keys.task(ent, "web", index)
                    if kind == "task"
                    else keys.operation(ent, "web", f"op-{index}")
                )
                space.put(key, b"{}") if present else space.delete(key)
            case ("owner", int(index), owner):
                machine = f"m{index}"
                if owner == "gone":
                    space.delete(keys.allocation(machine))
                else:
                    assert owner is None or isinstance(owner, str)
                    space.put(keys.allocation(machine), owned_by(machine, owner))
            case ("entry", int(index), str(ent), bool(present)):
                key = keys.allocation_entry(f"m{index}", ent, "web", 0)
                space.put(key, to_json(Resources(cpu=1))) if present else space.delete(key)
            case ("relist", str(prefix)):
                space.relist(prefix)
        space.check()
