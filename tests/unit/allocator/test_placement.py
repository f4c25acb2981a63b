"""Placement on the index: hard rules, entitlements as pseudo-clusters, quotas, preferences,
spread, affinity, gang, and keeping an earlier choice after a conflict."""

from __future__ import annotations

from collections import Counter
from typing import Literal

import pytest

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.model import (
    Affinity,
    Constraint,
    ConstraintOp,
    Entitlement,
    FaultDomain,
    Job,
    MachineState,
    Placement,
    Preference,
    Resources,
    Spread,
)


def chosen(region: Region, placed_job: Job, owner: Entitlement) -> list[str]:
    """The machine ids `choose` picks for every task of the job, sorted (repeats kept)."""
    return region.ids(region.choose(placed_job, owner).placements.values())


def own(region: Region, owner: str, *machine_ids: str) -> None:
    """Puts the machines in the entitlement with empty records, as an earlier grow left them."""
    for machine_id in machine_ids:
        region.put_record(machine_id, allocation(machine_id, owner=owner))


# --- hard constraints ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("constraint", "attributes", "fits"),
    [
        (Constraint(attribute="zone", op=ConstraintOp.EQ, value="a"), {"zone": "a"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.EQ, value="a"), {"zone": "b"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.EQ, value="a"), {}, False),
        (Constraint(attribute="zone", op=ConstraintOp.EQ, value="zz"), {"zone": "a"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.NE, value="a"), {"zone": "b"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.NE, value="a"), {"zone": "a"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.NE, value="a"), {}, True),
        (Constraint(attribute="other", op=ConstraintOp.NE, value="a"), {"zone": "a"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.IN, values=["a", "b"]), {"zone": "b"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.IN, values=["a", "b"]), {"zone": "c"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.IN, values=["a"]), {}, False),
        (Constraint(attribute="zone", op=ConstraintOp.IN, values=["x", "y"]), {"zone": "a"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.NOT_IN, values=["a"]), {"zone": "b"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.NOT_IN, values=["a"]), {"zone": "a"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.NOT_IN, values=["a"]), {}, True),
        (Constraint(attribute="zone", op=ConstraintOp.NOT_IN, values=["x"]), {"zone": "a"}, True),
        (Constraint(attribute="ssd", op=ConstraintOp.EXISTS), {"ssd": ""}, True),
        (Constraint(attribute="ssd", op=ConstraintOp.EXISTS), {"hdd": "1"}, False),
        # Numeric, not lexicographic: "10" >= "9".
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {"cores": "10"}, True),
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {"cores": "9"}, True),
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {"cores": "8.5"}, False),
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {"cores": "many"}, False),
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {}, False),
        (Constraint(attribute="cores", op=ConstraintOp.LE, value="9"), {"cores": "10"}, False),
        (Constraint(attribute="cores", op=ConstraintOp.LE, value="9"), {"cores": "9"}, True),
        (Constraint(attribute="cores", op=ConstraintOp.LE, value="9"), {"cores": "-1e3"}, True),
        (Constraint(attribute="cores", op=ConstraintOp.LE, value="9"), {"cores": "few"}, False),
        (Constraint(attribute="cores", op=ConstraintOp.LE, value="9"), {}, False),
    ],
)
def test_constraint_kinds(constraint: Constraint, attributes: dict[str, str], fits: bool) -> None:
    ads = entitlement()
    # A second machine gives the attribute values a column even when the first lacks it.
    region = Region().add(
        machine("m1", attributes=attributes),
        machine("other", memory=512, attributes={"zone": "q", "cores": "1"}),
    )
    region.entitle(ads)
    choice = region.choose(job(count=1, placement=Placement(constraints=[constraint])), ads)
    assert region.ids(choice.placements.values()) == (["m1"] if fits else [])
    if not fits:
        assert "fails constraint" in choice.unplaced[0]


def test_constraints_combine() -> None:
    ads = entitlement()
    region = Region().add(
        machine("m1", attributes={"zone": "a", "cores": "16"}),
        machine("m2", attributes={"zone": "b", "cores": "16"}),
        machine("m3", attributes={"zone": "a", "cores": "4"}),
    )
    placement = Placement(
        constraints=[
            Constraint(attribute="zone", op=ConstraintOp.EQ, value="a"),
            Constraint(attribute="cores", op=ConstraintOp.GE, value="8"),
        ]
    )
    choice = region.choose(job(count=2, placement=placement), ads)
    assert region.ids(choice.placements.values()) == ["m1", "m1"]


def test_hardware_types() -> None:
    ads = entitlement()
    region = Region().add(
        machine("std", hardware="std"),
        machine("gpu", hardware="gpu"),
        machine("arm", hardware="arm"),
    )
    # One MSB: four tasks fill a machine, eight fill both allowed ones, the ninth fits nowhere.
    choice = region.choose(job(count=9, placement=Placement(hardware_types=["gpu", "arm"])), ads)
    assert Counter(region.ids(choice.placements.values())) == {"gpu": 4, "arm": 4}
    assert "1 of 3: hardware type not allowed (allowed: arm, gpu)" in choice.unplaced[8]
    choice = region.choose(job(count=1, placement=Placement(hardware_types=["tpu"])), ads)
    assert choice.placements == {}
    assert "3 of 3 machines: hardware type not allowed (allowed: tpu)" in choice.unplaced[0]


def test_job_datacenters_and_entitlement_dcs_must_both_allow() -> None:
    region = Region().add(*(machine(f"m-{dc}", dc=dc) for dc in ("dc1", "dc2", "dc3")))
    both = chosen(
        region,
        job(count=1, placement=Placement(datacenters=["dc2", "dc3"])),
        entitlement(allowed_dcs=["dc1", "dc2"]),
    )
    assert both == ["m-dc2"]
    assert set(chosen(region, job(count=4), entitlement(allowed_dcs=["dc1", "dc3"]))) == {
        "m-dc1",
        "m-dc3",
    }
    choice = region.choose(
        job(count=1, placement=Placement(datacenters=["dc3"])), entitlement(allowed_dcs=["dc1"])
    )
    assert choice.unplaced[0] == (
        "no machine fits: 3 of 3 machines: datacenter not allowed "
        "(entitlement ads allows dc1; job ads/web allows dc3)"
    )


@pytest.mark.parametrize(
    "state", [MachineState.DRAINING, MachineState.MAINTENANCE, MachineState.DOWN]
)
def test_machines_not_up_are_never_chosen(state: MachineState) -> None:
    ads = entitlement()
    region = Region().add(
        machine("pool", state=state),
        machine("owned", state=state),
        machine("up", memory=2048),
    )
    own(region, "ads", "owned")
    choice = region.choose(job(count=3), ads)
    assert region.ids(choice.placements.values()) == ["up", "up"]
    assert choice.unplaced[2].startswith("no machine fits: ")
    assert f"not up (2 {state.value})" in choice.unplaced[2]
    # A machine that comes back up is chosen again.
    region.add(machine("owned"))
    assert "owned" in chosen(region, job(count=3), ads)


# --- entitlements as pseudo-clusters ---------------------------------------------------------


def test_machines_of_another_entitlement_are_never_chosen() -> None:
    ads, ml = entitlement(), entitlement("ml")
    region = Region().add(machine("theirs", memory=65536), machine("pool"))
    region.entitle(ads, ml)
    own(region, "ml", "theirs")
    choice = region.choose(job(count=5), ads)
    assert region.ids(choice.placements.values()) == ["pool"] * 4
    assert choice.unplaced[4] == (
        "no machine fits: 1 of 2 machines: assigned to another entitlement (assigned to ml); "
        "1 of 2: insufficient memory (need 1024 MiB, best has 0 MiB free)"
    )


def test_free_pool_machines_join_the_entitlement() -> None:
    ads = entitlement(host_profile="web")
    region = Region().add(
        machine("a", msb="msb1"), machine("b", msb="msb2"), machine("c", msb="msb3")
    )
    region.entitle(ads)
    choice = region.choose(job(count=2), ads)
    assert len(choice.placements) == 2
    assert choice.joined == set(choice.placements.values())
    region.commit(job(count=2), ads, choice)
    for machine_id in region.ids(choice.joined):
        record, entries = region.stored(machine_id)
        assert record is not None
        assert (record.entitlement, record.host_profile) == ("ads", "web")
        assert len(entries) == 1
    joined = region.ids(choice.joined)
    assert [region.owner_of(m) for m in joined] == ["ads", "ads"]
    assert [m for m in "abc" if region.owner_of(m) is None] == sorted(set("abc") - set(joined))


def test_stacking_on_the_entitlements_machines_first() -> None:
    ads = entitlement()
    # "tight" would fit best, but "owned" is already in the entitlement, in the same MSB.
    region = Region().add(machine("owned", memory=8192), machine("tight", memory=1024)).entitle(ads)
    own(region, "ads", "owned")
    choice = region.choose(job(count=8), ads)
    assert region.ids(choice.placements.values()) == ["owned"] * 8
    assert choice.joined == set()
    # When the entitlement's machines are full, the pool grows it.
    choice = region.choose(job(count=9), ads)
    assert region.ids(choice.placements.values()) == ["owned"] * 8 + ["tight"]
    assert region.ids(choice.joined) == ["tight"]


def test_stacking_prefers_domains_with_owned_room() -> None:
    ads = entitlement()
    region = Region().add(machine("pool", msb="msb1"), machine("owned", msb="msb2")).entitle(ads)
    own(region, "ads", "owned")
    choice = region.choose(job(count=1), ads)
    assert region.ids(choice.placements.values()) == ["owned"]
    assert choice.joined == set()


@pytest.mark.parametrize(
    ("need", "unit", "dimension"),
    [
        ({"cpu": 3000}, "3000 millicores", "cpu"),
        ({"memory": 3000}, "3000 MiB", "memory"),
        ({"disk": 60}, "60 GiB", "disk"),
        ({"gpus": 2}, "2", "gpus"),
        ({"extra": {"fpga": 2}}, "2", "extra/fpga"),
    ],
)
def test_resources_per_dimension(need: dict[str, object], unit: str, dimension: str) -> None:
    ads = entitlement(extra={"fpga": 100})
    region = (
        Region()
        .add(machine("m1", cpu=4000, memory=4096, disk=100, gpus=3, extra={"fpga": 3}))
        .entitle(ads)
    )
    task = job(count=2, **({"cpu": 1, "memory": 1} | need))  # type: ignore[arg-type]
    choice = region.choose(task, ads)
    assert region.ids(choice.placements.values()) == ["m1"]
    best = {"cpu": "1000 millicores", "memory": "1096 MiB", "disk": "40 GiB"}.get(dimension, "1")
    assert choice.unplaced == {
        1: f"no machine fits: 1 of 1 machines: insufficient {dimension} "
        f"(need {unit}, best has {best} free)"
    }


def test_a_machine_without_an_extra_resource_does_not_fit_it() -> None:
    ads = entitlement(extra={"fpga": 10})
    region = Region().add(machine("plain", memory=65536), machine("fpga", extra={"fpga": 1}))
    region.entitle(ads)
    choice = region.choose(job(count=2, extra={"fpga": 1}), ads)
    assert region.ids(choice.placements.values()) == ["fpga"]
    assert "insufficient extra/fpga" in choice.unplaced[1]


def test_resource_quota_limits_the_tasks() -> None:
    ads = entitlement(memory=4096)
    region = Region().add(*(machine(f"m{n}", msb=f"msb{n}", memory=8192) for n in range(3)))
    region.entitle(ads)
    region.put_record("m0", allocation("m0", ("ads/old", 0, Resources(memory_mib=2048))))
    choice = region.choose(job(count=3), ads)
    assert len(choice.placements) == 2
    # The reason counts the request's own two tasks against the quota.
    assert choice.unplaced == {
        2: "entitlement ads quota exceeded: memory: 1024 MiB more, 4096 MiB of 4096 MiB in use"
    }
    region.commit(job(count=3), ads, choice)
    assert region.choose(job(count=3), ads).unplaced == {
        2: "entitlement ads quota exceeded: memory: 1024 MiB more, 4096 MiB of 4096 MiB in use"
    }
    # Without quota for an extra resource machines offer, no task needing it is placed.
    region.add(machine("f", msb="msb9", extra={"fpga": 2}))
    choice = region.choose(job("fpga", count=1, memory=0, extra={"fpga": 1}), ads)
    assert choice.unplaced[0].startswith("entitlement ads quota exceeded: extra/fpga: 1 more")


def test_machine_quota_limits_how_many_pool_machines_join() -> None:
    ads = entitlement(machines={"std": 2})
    region = Region().add(*(machine(f"m{n}", msb=f"msb{n}") for n in range(4)))
    region.add(machine("gpu", hardware="gpu"))
    region.entitle(ads)
    choice = region.choose(job(count=12, memory=2048), ads)
    # Two std machines of two tasks each; no gpu machine (the quota lists none).
    assert len(choice.joined) == 2
    assert {region.index.hardware.name(int(region.index.hw[row])) for row in choice.joined} == {
        "std"
    }
    assert len(choice.placements) == 4
    assert set(choice.unplaced) == set(range(4, 12))
    # A machine the entitlement already holds counts against the quota.
    region.commit(job(count=12, memory=2048), ads, choice)
    assert region.choose(job("more", count=1), ads).joined == set()


def test_host_profile_carriers_are_preferred_in_the_pool() -> None:
    ads = entitlement(host_profile="fast")
    region = Region().add(
        machine("a-plain", memory=2048),
        machine("b-switched", memory=8192, profile="fast"),
        machine("c-other", memory=2048, profile="slow"),
    )
    region.entitle(ads)
    # "b-switched" carries the profile, so it beats the tighter fits.
    assert chosen(region, job(count=1), ads) == ["b-switched"]
    # Without a profile the best fit (least free memory, then id) wins.
    assert chosen(region, job(count=1), entitlement("ml")) == ["a-plain"]


# --- preferences -----------------------------------------------------------------------------


def test_a_higher_preference_outweighs_all_lower_ones() -> None:
    region = Region().add(
        machine("first-only", memory=8192, attributes={"ssd": "1"}),
        machine("second-third", memory=2048, attributes={"fast": "1", "new": "1"}),
        machine("none", memory=1024),
    )
    placement = Placement(
        preferences=[
            Preference(attribute="ssd", op=ConstraintOp.EXISTS, weight=1),
            Preference(attribute="fast", op=ConstraintOp.EQ, value="1", weight=100),
            Preference(attribute="new", op=ConstraintOp.IN, values=["1"], weight=100),
        ]
    )
    assert chosen(region, job(count=1, placement=placement), entitlement()) == ["first-only"]
    # Among machines equal on the first rule, the second decides; then the best fit.
    placement = Placement(preferences=placement.preferences[1:])
    assert chosen(region, job(count=1, placement=placement), entitlement()) == ["second-third"]
    assert chosen(region, job(count=1), entitlement()) == ["none"]


def test_preferences_rank_the_entitlements_machines() -> None:
    ads = entitlement()
    region = Region().add(
        machine("plain", msb="msb1", memory=2048),
        machine("ssd", msb="msb2", memory=8192, attributes={"ssd": "1"}),
    )
    region.entitle(ads)
    own(region, "ads", "plain", "ssd")
    placement = Placement(preferences=[Preference(attribute="ssd", op=ConstraintOp.EXISTS)])
    assert chosen(region, job(count=1, placement=placement), ads) == ["ssd"]
    assert chosen(region, job(count=1), ads) == ["plain"]


# --- spread ----------------------------------------------------------------------------------


def tallies(region: Region, rows: list[int], level: FaultDomain) -> dict[str, int]:
    """Tasks per domain of `level`, every domain of the region included."""
    index = region.index
    column, names = {
        FaultDomain.DC: (index.dc, index.dcs),
        FaultDomain.MSB: (index.msb, index.msbs),
        FaultDomain.RACK: (index.rack, index.racks),
    }[level]
    counts = Counter(int(column[row]) for row in rows)
    return {name: counts[code] for code, name in enumerate(names.names)}


def spread_region() -> Region:
    """2 datacenters x 2 MSBs x 2 racks x 2 machines, each with room for 8 tasks."""
    return Region().add(
        *(
            machine(f"{dc}-{msb}-{rack}-{n}", dc=dc, msb=msb, rack=rack, memory=8192, cpu=64000)
            for dc in ("dc1", "dc2")
            for msb in ("msb1", "msb2")
            for rack in ("r1", "r2")
            for n in range(2)
        )
    )


@pytest.mark.parametrize("level", [FaultDomain.DC, FaultDomain.MSB, FaultDomain.RACK])
@pytest.mark.parametrize(("max_skew", "count"), [(1, 7), (1, 13), (2, 7), (2, 13)])
def test_spread_keeps_task_counts_within_max_skew(
    level: FaultDomain, max_skew: int, count: int
) -> None:
    region = spread_region().entitle(entitlement())
    placement = Placement(spread=Spread(level=level, max_skew=max_skew))
    choice = region.choose(job(count=count, placement=placement), entitlement())
    assert len(choice.placements) == count
    counts = list(tallies(region, list(choice.placements.values()), level).values())
    domains = {"dc": 2, "msb": 4, "rack": 8}[level.value]
    assert len(counts) == domains
    assert max(counts) - min(counts) <= max_skew
    if max_skew == 1:
        assert sorted(counts) == sorted(
            count // domains + (i < count % domains) for i in range(domains)
        )


@pytest.mark.parametrize(
    ("max_skew", "expected", "joined"), [(1, ["owned", "pool"], ["pool"]), (2, ["owned"] * 2, [])]
)
def test_max_skew_leaves_room_for_stacking(
    max_skew: int, expected: list[str], joined: list[str]
) -> None:
    ads = entitlement()
    region = Region().add(machine("owned", msb="msb1"), machine("pool", msb="msb2")).entitle(ads)
    own(region, "ads", "owned")
    placement = Placement(spread=Spread(max_skew=max_skew))
    choice = region.choose(job(count=2, placement=placement), ads)
    assert region.ids(choice.placements.values()) == expected
    assert region.ids(choice.joined) == joined


def test_spread_is_over_msbs_by_default() -> None:
    region = spread_region()
    choice = region.choose(job(count=4), entitlement())
    assert tallies(region, list(choice.placements.values()), FaultDomain.MSB) == {
        f"{dc}/{msb}": 1 for dc in ("dc1", "dc2") for msb in ("msb1", "msb2")
    }


def test_spread_counts_tasks_already_placed() -> None:
    ads = entitlement()
    region = Region().add(*(machine(f"m{n}", msb=f"msb{n}") for n in range(3))).entitle(ads)
    web = job()
    region.place(web, ads, [0, 1])
    first = set(region.placements(web).values())
    assert len(first) == 2
    choice = region.choose(web, ads)
    [third] = region.ids(choice.placements.values())
    assert third not in first


def test_spread_fills_other_domains_when_one_is_full() -> None:
    ads = entitlement()
    region = (
        Region()
        .add(machine("small", msb="msb1", memory=1024), machine("big", msb="msb2", memory=8192))
        .entitle(ads)
    )
    choice = region.choose(job(count=5), ads)
    assert region.ids(choice.placements.values()) == ["big"] * 4 + ["small"]
    assert choice.unplaced == {}


# --- affinity --------------------------------------------------------------------------------


def affinity_region() -> tuple[Region, Entitlement]:
    """Rack r1: m1 (holds ads/db) and m2; rack r2: m3; every machine owned by ads."""
    ads = entitlement()
    region = Region().add(
        machine("m1", rack="r1", memory=8192),
        machine("m2", rack="r1"),
        machine("m3", rack="r2"),
    )
    region.entitle(ads)
    own(region, "ads", "m2", "m3")
    region.put_record(
        "m1", allocation("m1", ("ads/db", 0, Resources(memory_mib=1024)), owner="ads")
    )
    return region, ads


@pytest.mark.parametrize(
    ("level", "anti", "allowed"),
    [
        ("machine", False, {"m1"}),
        ("rack", False, {"m1", "m2"}),
        ("machine", True, {"m2", "m3"}),
        ("rack", True, {"m3"}),
    ],
)
def test_affinity_and_anti_affinity(
    level: Literal["machine", "rack"], anti: bool, allowed: set[str]
) -> None:
    region, ads = affinity_region()
    placement = Placement(
        affinities=[Affinity(job="ads/db", level=level, anti=anti)],
        spread=Spread(max_skew=100),
    )
    choice = region.choose(job(count=3, memory=512, placement=placement), ads)
    assert len(choice.placements) == 3
    assert set(region.ids(choice.placements.values())) <= allowed


def test_affinity_with_a_job_that_has_no_tasks() -> None:
    region, ads = affinity_region()
    placement = Placement(affinities=[Affinity(job="ads/none")])
    choice = region.choose(job(count=1, placement=placement), ads)
    assert choice.placements == {}
    assert "machine holds no task of ads/none" in choice.unplaced[0]
    anti = Placement(affinities=[Affinity(job="ads/none", anti=True)])
    assert len(region.choose(job(count=1, placement=anti), ads).placements) == 1


# --- gang ------------------------------------------------------------------------------------


def test_gang_is_all_or_nothing() -> None:
    ads = entitlement()
    region = Region().add(machine("m1", memory=2048)).entitle(ads)
    choice = region.choose(job(count=3, placement=Placement(gang=True)), ads)
    assert (choice.placements, choice.joined) == ({}, set())
    assert set(choice.unplaced) == {0, 1, 2}
    for reason in choice.unplaced.values():
        assert reason.startswith("gang job: 2 of 3 tasks fit, so none is placed; no machine fits")
    choice = region.choose(job(count=2, placement=Placement(gang=True)), ads)
    assert len(choice.placements) == 2
    assert choice.unplaced == {}


def test_gang_stopped_by_quota() -> None:
    ads = entitlement(memory=2048)
    region = Region().add(machine("m1", memory=8192)).entitle(ads)
    choice = region.choose(job(count=3, placement=Placement(gang=True)), ads)
    assert (choice.placements, choice.joined) == ({}, set())
    assert set(choice.unplaced) == {0, 1, 2}
    assert choice.unplaced[0].startswith("gang job: 2 of 3 tasks fit, so none is placed; ")


# --- keep (merge after a conflict) -----------------------------------------------------------


def test_kept_rows_that_still_fit_are_kept() -> None:
    ads = entitlement()
    region = Region().add(machine("a", memory=3072), machine("b", memory=4096)).entitle(ads)
    own(region, "ads", "a", "b")
    first = region.choose(job(count=2), ads)
    assert region.ids(first.placements.values()) == ["a", "a"]
    # Another allocator took 1 GiB of "a" meanwhile: both kept tasks still fit.
    region.put_record(
        "a", allocation("a", ("ads/other", 0, Resources(memory_mib=1024)), owner="ads")
    )
    again = region.choose(job(count=2), ads, keep=first.placements)
    assert again.placements == first.placements
    assert again.joined == set()


def test_a_kept_row_that_no_longer_fits_is_chosen_again() -> None:
    ads = entitlement()
    region = Region().add(machine("a", memory=3072), machine("b", memory=4096)).entitle(ads)
    first = region.choose(job(count=2), ads)
    region.put_record("a", allocation("a", ("ads/other", 0, Resources(memory_mib=2048))))
    again = region.choose(job(count=2), ads, keep=first.placements)
    assert region.ids(again.placements.values()) == ["a", "b"]
    assert region.ids(again.joined) == ["a", "b"]


def test_a_kept_row_taken_by_another_entitlement_is_chosen_again() -> None:
    ads = entitlement()
    region = Region().add(machine("a"), machine("b", memory=8192)).entitle(ads, entitlement("ml"))
    first = region.choose(job(count=1), ads)
    own(region, "ml", "a")
    again = region.choose(job(count=1), ads, keep=first.placements)
    assert region.ids(again.placements.values()) == ["b"]
    assert region.ids(again.joined) == ["b"]


def test_kept_rows_for_tasks_not_asked_are_ignored() -> None:
    ads = entitlement()
    region = Region().add(machine("a"), machine("b", memory=1024)).entitle(ads)
    choice = region.planner(job(count=3), ads).choose([0], {}, keep={1: region.row("b")})
    assert list(choice.placements) == [0]


# --- unreadable records ----------------------------------------------------------------------


def test_a_machine_with_an_unreadable_record_is_never_chosen() -> None:
    ads = entitlement()
    region = Region().add(machine("broken", memory=2048), machine("fine", memory=1024)).entitle(ads)
    region.put_record("broken", b"[1, 2]")
    choice = region.choose(job(count=2), ads)
    assert region.ids(choice.placements.values()) == ["fine"]
    assert choice.unplaced[1].startswith(
        "no machine fits: 1 of 2 machines: unreadable allocation record; "
    )


def test_no_machines_at_all() -> None:
    choice = Region().choose(job(count=1), entitlement())
    assert choice.unplaced == {0: "no machine fits: the region has no machines"}
