"""Property-based placement: random small regions and job sequences, checked against the
invariants no placement may break, with the facts recomputed from the records."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.allocator_builders import BIG, Region, allocation, entitlement, job, machine
from tether.model import (
    AttributePredicate,
    Constraint,
    ConstraintOp,
    Entitlement,
    FaultDomain,
    Job,
    Machine,
    MachineState,
    Placement,
    Preference,
    Resources,
    Spread,
)

logging.getLogger("tether.allocator.index").setLevel(logging.ERROR)

ENTITLEMENTS = ("ads", "ml")


def amounts(resources: Resources) -> Counter[str]:
    return Counter({label: amount for label, amount in resources.amounts().items() if amount})


# --- strategies ------------------------------------------------------------------------------
# Weighted towards what places tasks, so that most examples exercise placement, not refusal.

T = TypeVar("T")


def often(usual: T, *others: T) -> st.SearchStrategy[T]:
    """`usual` about two times in three, else one of `others`."""
    return st.sampled_from([usual] * max(2, 2 * len(others)) + list(others))


@st.composite
def machines(draw: st.DrawFn, n: int) -> Machine:
    attributes = {}
    zone = draw(st.sampled_from(["a", "b", None]))
    if zone:
        attributes["zone"] = zone
    gen = draw(st.sampled_from(["1", "3", "5", "x", None]))
    if gen:
        attributes["gen"] = gen
    return machine(
        f"m{n}",
        dc=draw(st.sampled_from(["dc1", "dc2"])),
        msb=draw(st.sampled_from(["msb1", "msb2", "msb3"])),
        rack=draw(st.sampled_from(["r1", "r2"])),
        hardware=draw(often("std", "gpu")),
        state=draw(often(MachineState.UP, *list(MachineState)[1:])),
        cpu=draw(st.sampled_from([1000, 4000, 8000])),
        memory=draw(st.sampled_from([1024, 4096, 8192])),
        gpus=draw(st.sampled_from([0, 1, 2])),
        extra={"fpga": draw(st.sampled_from([0, 1, 2]))},
        attributes=attributes,
        profile=draw(often(None, "fast")),
    )


@dataclass(frozen=True)
class Scenario:
    machines: list[Machine]
    records: dict[str, bytes | tuple[str | None, float]]
    """Machine id -> an unreadable value, or (owner, fraction of its capacity in use)."""
    entitlements: list[Entitlement]
    jobs: list[Job]


_predicates = st.sampled_from(
    [
        AttributePredicate(attribute="zone", op=ConstraintOp.EQ, value="a"),
        AttributePredicate(attribute="zone", op=ConstraintOp.NE, value="a"),
        AttributePredicate(attribute="zone", op=ConstraintOp.IN, values=["a", "c"]),
        AttributePredicate(attribute="zone", op=ConstraintOp.NOT_IN, values=["b"]),
        AttributePredicate(attribute="zone", op=ConstraintOp.EXISTS),
        AttributePredicate(attribute="gen", op=ConstraintOp.GE, value="3"),
        AttributePredicate(attribute="gen", op=ConstraintOp.LE, value="3"),
    ]
)


@st.composite
def placements(draw: st.DrawFn) -> Placement:
    constraints = draw(st.lists(_predicates, max_size=draw(often(0, 1, 2))))
    preferences = draw(st.lists(_predicates, max_size=2))
    return Placement(
        constraints=[Constraint.model_validate(p.model_dump()) for p in constraints],
        preferences=[Preference.model_validate(p.model_dump()) for p in preferences],
        hardware_types=draw(often([], ["std"], ["gpu"])),
        datacenters=draw(often([], ["dc1"], ["dc2"])),
        spread=Spread(
            level=draw(st.sampled_from(list(FaultDomain))),
            max_skew=draw(st.integers(min_value=1, max_value=3)),
        ),
        gang=draw(often(False, True)),
    )


@st.composite
def entitlements(draw: st.DrawFn, name: str) -> Entitlement:
    return entitlement(
        name,
        cpu=draw(often(BIG, 4000, 12000)),
        memory=draw(often(BIG, 8192, 20000)),
        gpus=draw(often(BIG, 2)),
        extra={"fpga": draw(often(BIG, 0, 2))},
        machines=draw(often({}, {"std": 2}, {"std": 3, "gpu": 1}, {"gpu": 2})),
        allowed_dcs=draw(often([], ["dc1"], ["dc1", "dc2"])),
        host_profile=draw(often(None, "fast")),
    )


@st.composite
def jobs(draw: st.DrawFn, n: int) -> Job:
    return job(
        f"j{n}",
        entitlement=draw(st.sampled_from(ENTITLEMENTS)),
        count=draw(st.integers(min_value=1, max_value=8)),
        cpu=draw(st.sampled_from([0, 250, 500, 1000, 2000])),
        memory=draw(st.sampled_from([0, 256, 512, 1024, 3000])),
        gpus=draw(often(0, 1)),
        extra={"fpga": draw(often(0, 1))},
        placement=draw(placements()),
    )


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    count = draw(st.integers(min_value=4, max_value=16))
    region_machines = [draw(machines(n)) for n in range(count)]
    records: dict[str, bytes | tuple[str | None, float]] = {}
    for added in region_machines:
        kind = draw(often("none", "unreadable", "owned", "pool"))
        if kind == "unreadable":
            records[added.id] = b"{"
        elif kind != "none":
            owner = draw(st.sampled_from([*ENTITLEMENTS, "other"])) if kind == "owned" else None
            records[added.id] = (owner, draw(st.sampled_from([0.0, 0.25, 0.5])))
    return Scenario(
        region_machines,
        records,
        [draw(entitlements(name)) for name in ENTITLEMENTS],
        [draw(jobs(n)) for n in range(draw(st.integers(min_value=1, max_value=5)))],
    )


# --- an oracle computed from the models, not from the index's columns ------------------------


def satisfies(predicate: AttributePredicate, attributes: Mapping[str, str]) -> bool:
    value = attributes.get(predicate.attribute)
    match predicate.op:
        case ConstraintOp.EQ:
            return value == predicate.value
        case ConstraintOp.NE:
            return value != predicate.value
        case ConstraintOp.IN:
            return value in predicate.values
        case ConstraintOp.NOT_IN:
            return value not in predicate.values
        case ConstraintOp.EXISTS:
            return value is not None
    try:
        number = float(value or "nan")
    except ValueError:
        return False
    bound = float(predicate.value or "nan")
    return number >= bound if predicate.op is ConstraintOp.GE else number <= bound


def machine_allowed(placed: Machine, placed_job: Job, owner: Entitlement) -> bool:
    """The rules about the machine alone: state, datacenters, hardware, constraints."""
    placement = placed_job.spec.placement
    return (
        placed.state is MachineState.UP
        and (not owner.allowed_dcs or placed.topology.dc in owner.allowed_dcs)
        and (not placement.datacenters or placed.topology.dc in placement.datacenters)
        and (not placement.hardware_types or placed.hardware_type in placement.hardware_types)
        and all(satisfies(c, placed.attributes) for c in placement.constraints)
    )


@dataclass
class Held:
    """What the records say: used resources per machine, usage per entitlement, owners."""

    used: dict[str, Counter[str]]
    usage: dict[str, Counter[str]]
    owner: dict[str, str | None]
    readable: dict[str, bool]


def held(region: Region, by_id: Mapping[str, Machine]) -> Held:
    index = region.index
    used: dict[str, Counter[str]] = {}
    usage: dict[str, Counter[str]] = {}
    owner: dict[str, str | None] = {}
    readable: dict[str, bool] = {}
    for machine_id in by_id:
        row = region.row(machine_id)
        record, entries = region.stored(machine_id)
        owner[machine_id] = None if record is None else record.entitlement
        readable[machine_id] = bool(index.readable[row])
        total: Counter[str] = Counter()
        for task_id, resources in entries.items():
            total.update(amounts(resources))
            usage.setdefault(task_id.split("/")[0], Counter()).update(amounts(resources))
        used[machine_id] = total
        # The index's columns agree with what was written.
        columns = {
            label: int(index.used[row, column]) for label, column in index.dimension_of.items()
        }
        assert {label: amount for label, amount in columns.items() if amount} == dict(total)
        assert (index.free[row] == index.capacity[row] - index.used[row]).all()
        assert index.task_count[row] == len(entries)
    return Held(used, usage, owner, readable)


def fits(placed: Machine, used: Counter[str], need: Counter[str]) -> bool:
    """Whether `need` fits next to `used` in every dimension (nothing over capacity)."""
    capacity = amounts(placed.capacity)
    total = used + need
    return all(total[label] <= capacity[label] for label in total)


def domain(placed: Machine, level: FaultDomain) -> str:
    return level.of(placed.topology)


# --- the properties --------------------------------------------------------------------------


def setup(scenario: Scenario) -> Region:
    region = Region().add(*scenario.machines).entitle(*scenario.entitlements)
    by_id = {m.id: m for m in scenario.machines}
    for machine_id, record in scenario.records.items():
        if isinstance(record, bytes):
            region.put_record(machine_id, record)
            continue
        owner, fraction = record
        capacity = by_id[machine_id].capacity
        share = Resources(
            cpu=math.floor(capacity.cpu * fraction),
            memory_mib=math.floor(capacity.memory_mib * fraction),
        )
        tasks = [(f"{owner or 'other'}/pre", 0, share)] if fraction else []
        region.put_record(machine_id, allocation(machine_id, *tasks, owner=owner))
    return region


class Checker:
    """Places jobs one after the other on a scenario's region, checking every choice."""

    def __init__(self, scenario: Scenario) -> None:
        self.region = setup(scenario)
        self.by_id = {m.id: m for m in scenario.machines}
        self.entitlements = {e.name: e for e in scenario.entitlements}

    def place(self, placed_job: Job, keep: Mapping[int, int] | None = None) -> None:
        """Chooses for every task of the job, checks the choice, commits it, checks again."""
        region, by_id = self.region, self.by_id
        owner = self.entitlements[placed_job.spec.entitlement]
        before = held(region, by_id)
        indexes = list(range(placed_job.spec.count))
        choice = region.choose(placed_job, owner, indexes, keep)

        # Every task is placed or unplaced with a reason, never both.
        assert set(choice.placements) | set(choice.unplaced) == set(indexes)
        assert not set(choice.placements) & set(choice.unplaced)
        assert all(reason for reason in choice.unplaced.values())
        if placed_job.spec.placement.gang:
            assert not choice.placements or not choice.unplaced
        chosen = set(region.ids(choice.placements.values()))
        joined = set(region.ids(choice.joined))
        for machine_id in chosen:
            # Only up machines that pass the machine rules, readable, the entitlement's own or
            # from the free pool (and those move into it).
            assert machine_allowed(by_id[machine_id], placed_job, owner)
            assert before.readable[machine_id]
            assert before.owner[machine_id] in (None, owner.name)
            assert (machine_id in joined) == (before.owner[machine_id] is None)
        assert joined <= chosen

        region.commit(placed_job, owner, choice)
        after = held(region, by_id)
        for machine_id in chosen:
            assert after.owner[machine_id] == owner.name
        # No machine holds more than its capacity in any dimension.
        assert all(fits(by_id[m], after.used[m], Counter()) for m in by_id)
        # The resource quota holds in every dimension the job asked for.
        if choice.placements:
            quota = amounts(owner.quota.resources)
            usage = after.usage.get(owner.name, Counter())
            assert all(
                usage[label] <= quota[label] for label in amounts(placed_job.spec.task.resources)
            )
        # The machine quota holds for every hardware type that grew.
        limits = owner.quota.machines
        if limits:
            grown = Counter(by_id[m].hardware_type for m in joined)
            owned = Counter(
                by_id[m].hardware_type for m, name in after.owner.items() if name == owner.name
            )
            assert all(owned[hardware] <= limits.get(hardware, 0) for hardware in grown)
        check_spread(region, placed_job, owner, choice.placements, by_id, after)
        explanation = region.explain(placed_job, owner)
        assert explanation.considered == len(by_id)
        rejected = sum(outcome.rejected for outcome in explanation.outcomes)
        assert rejected + explanation.fitting == explanation.considered

    def conflict(self, placed_job: Job, interloper: Job) -> None:
        """As a lost commit race: the job's choice, another allocator's commit, a merge."""
        owner = self.entitlements[placed_job.spec.entitlement]
        first = self.region.choose(placed_job, owner)
        self.place(interloper)
        self.place(placed_job, keep=first.placements)

    def check_rebuild(self) -> None:
        """An index fed the final records from scratch holds what the incremental one does."""
        region = self.region
        fresh = Region().add(*self.by_id.values()).load(region.store)
        old, new = held(region, self.by_id), held(fresh, self.by_id)
        assert (old.used, old.owner, old.readable) == (new.used, new.owner, new.readable)
        assert {k: v for k, v in old.usage.items() if v} == {
            k: v for k, v in new.usage.items() if v
        }
        for handle in region.index.jobs_held():
            assert fresh.index.placements(handle) == region.index.placements(handle)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_placement_invariants(scenario: Scenario) -> None:
    checker = Checker(scenario)
    for placed_job in scenario.jobs:
        checker.place(placed_job)
    checker.check_rebuild()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios(), st.data())
def test_merge_after_a_conflict_keeps_the_invariants(
    scenario: Scenario, data: st.DataObject
) -> None:
    checker = Checker(scenario)
    for n, placed_job in enumerate(scenario.jobs):
        checker.conflict(placed_job, data.draw(jobs(100 + n)))
    checker.check_rebuild()


def check_spread(
    region: Region,
    placed_job: Job,
    owner: Entitlement,
    placements: Mapping[int, int],
    by_id: Mapping[str, Machine],
    after: Held,
) -> None:
    """Task counts per domain within max_skew among the domains that still have room."""
    if not placements:
        return
    spread = placed_job.spec.placement.spread
    need = amounts(placed_job.spec.task.resources)
    counts = Counter(
        domain(by_id[region.index.ids[row]], spread.level) for row in placements.values()
    )
    limits = owner.quota.machines
    owned = Counter(by_id[m].hardware_type for m, name in after.owner.items() if name == owner.name)

    def may_join(candidate: Machine) -> bool:
        hardware = candidate.hardware_type
        return not limits or owned[hardware] < limits.get(hardware, 0)

    def has_room(candidate: Machine) -> bool:
        current = after.owner[candidate.id]
        return (
            (current == owner.name or (current is None and may_join(candidate)))
            and after.readable[candidate.id]
            and machine_allowed(candidate, placed_job, owner)
            and fits(candidate, after.used[candidate.id], need)
        )

    with_room = {domain(m, spread.level) for m in by_id.values() if has_room(m)}
    most = max(counts.values())
    for name in with_room:
        assert most - counts[name] <= spread.max_skew, (name, counts, with_room)
