"""Cases that once went wrong in the allocator: each pins the behaviour that is right."""

from __future__ import annotations

from typing import Literal

import pytest

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.allocator import placement
from tether.model import (
    Affinity,
    ConstraintOp,
    FaultDomain,
    Placement,
    Preference,
    Resources,
    Spread,
)


@pytest.mark.parametrize(
    ("level", "anti", "pool_rack", "expected"),
    [
        # The other job's machine m0 is full: a machine-level affinity has nowhere to go.
        ("machine", False, "r1", []),
        # m1 is in another rack than the other job's task.
        ("rack", False, "r2", []),
        # m1 is in the rack of the other job's task.
        ("rack", True, "r1", []),
    ],
)
def test_affinity_applies_to_free_pool_machines(
    level: Literal["machine", "rack"], anti: bool, pool_rack: str, expected: list[str]
) -> None:
    ads = entitlement()
    region = (
        Region()
        .add(machine("m0", rack="r1", memory=1024), machine("m1", rack=pool_rack))
        .entitle(ads)
    )
    region.place(job("db", count=1), ads)
    assert region.placements(job("db", count=1)) == {0: "m0"}
    placement = Placement(affinities=[Affinity(job="ads/db", level=level, anti=anti)])
    choice = region.choose(job("web", count=1, placement=placement), ads)
    # Explain agrees that no machine passes the affinity rule; choose must too.
    assert region.ids(choice.placements.values()) == expected
    assert list(choice.unplaced) == [0]


def test_preferences_rank_free_pool_machines_across_msbs() -> None:
    ads = entitlement()
    region = (
        Region()
        .add(machine("plain", msb="msb1"), machine("ssd", msb="msb2", attributes={"ssd": "1"}))
        .entitle(ads)
    )
    preferences = [Preference(attribute="ssd", op=ConstraintOp.EXISTS)]
    choice = region.choose(job(count=1, placement=Placement(preferences=preferences)), ads)
    # One task: every MSB is within the spread's skew, so the preference decides.
    assert region.ids(choice.placements.values()) == ["ssd"]


def test_host_profile_preferred_across_msbs() -> None:
    ads = entitlement(host_profile="fast")
    region = (
        Region()
        .add(machine("plain", msb="msb1"), machine("switched", msb="msb2", profile="fast"))
        .entitle(ads)
    )
    choice = region.choose(job(count=1), ads)
    assert region.ids(choice.placements.values()) == ["switched"]


def test_pool_machine_whose_record_turns_unreadable_is_not_chosen() -> None:
    ads = entitlement()
    region = Region().add(machine("a"), machine("b", memory=8192)).entitle(ads)
    # The first choice fills the cache's free-pool list of msb1 ("a" fits best).
    assert region.ids(region.choose(job(count=1), ads).placements.values()) == ["a"]
    region.put_record("a", b"{garbage")
    choice = region.choose(job(count=2), ads)
    assert region.ids(choice.placements.values()) == ["b", "b"]


def test_kept_row_whose_record_turns_unreadable_is_chosen_again() -> None:
    ads = entitlement()
    region = Region().add(machine("a"), machine("b", memory=8192)).entitle(ads)
    region.place(job("db", count=1), ads)
    assert region.owner_of("a") == "ads"
    first = region.choose(job(count=1), ads)
    assert region.ids(first.placements.values()) == ["a"]
    # The commit conflicted: the record read back in the transaction is unreadable, which
    # takes "a" out of the entitlement and out of placement (its content is unknown).
    region.put_record("a", b"{garbage")
    assert region.ids(region.choose(job(count=1), ads).placements.values()) == ["b"]
    again = region.choose(job(count=1), ads, keep=first.placements)
    assert region.ids(again.placements.values()) == ["b"]


def test_machine_whose_unreadable_record_is_fixed_is_chosen_again() -> None:
    ads = entitlement()
    region = Region().add(machine("broken", memory=2048), machine("fine", memory=1024))
    region.entitle(ads)
    region.put_record("broken", b"[1, 2]")
    assert region.ids(region.choose(job(count=2), ads).placements.values()) == ["fine"]
    region.put_record("broken", allocation("broken"))
    choice = region.choose(job(count=2), ads)
    assert region.ids(choice.placements.values()) == ["broken", "fine"]


def test_kept_tasks_on_one_free_pool_machine_are_all_kept() -> None:
    ads = entitlement()
    region = Region().add(machine("a", memory=3072), machine("b", memory=4096)).entitle(ads)
    first = region.choose(job(count=2), ads)
    assert region.ids(first.placements.values()) == ["a", "a"]
    # Another allocator took 1 GiB of "a" meanwhile: both kept tasks still fit.
    region.put_record("a", allocation("a", ("ads/other", 0, Resources(memory_mib=1024))))
    again = region.choose(job(count=2), ads, keep=first.placements)
    assert again.placements == first.placements
    assert again.joined == first.joined


def test_resource_detail_names_the_closest_miss_among_rejected_machines() -> None:
    region = Region().add(machine("small", memory=512), machine("big", memory=8192))
    explanation = region.explain(job(), entitlement())
    memory = next(o for o in explanation.outcomes if o.rule == "resources.memory")
    assert memory.rejected == 1
    # "best has 8192 MiB free" contradicts the rejection: 8192 MiB would fit.
    assert memory.detail == "need 1024 MiB, best has 512 MiB free"


def test_explain_ranks_machines_as_choose_orders_them() -> None:
    ads = entitlement()
    region = Region().add(machine("a", memory=3072), machine("b", memory=4096, cpu=1500))
    region.entitle(ads)
    for machine_id in ("a", "b"):
        region.put_record(machine_id, allocation(machine_id, owner="ads"))
    web = job(count=1)
    region.place(web, ads)
    assert region.placements(web) == {0: "a"}
    # The next task would go to "a" too (least free memory first)...
    assert region.ids(region.choose(job("next", count=1), ads).placements.values()) == ["a"]
    # ...so "a" ranks first for one more task; Explain orders by free CPU first and says 2.
    [ranked] = region.explain(web, ads).chosen
    assert (ranked.machine, ranked.rank) == ("a", 1)


def test_quota_naming_an_extra_resource_no_machine_has_yet() -> None:
    # The quota's extra resource gets its column only when the planner reads the quota, after
    # it computed the task's vector: the two no longer have the same length.
    ads = entitlement(extra={"fpga": 2})
    region = Region().add(machine("m1")).entitle(ads)
    choice = region.choose(job(count=1), ads)  # IndexError in quota_room
    assert region.ids(choice.placements.values()) == ["m1"]
    assert Region().add(machine("m1")).entitle(ads).explain(job(), ads).fitting == 1


def test_merge_after_a_conflict_leaves_no_task_unplaced_that_fitted() -> None:
    # Same root as above: a kept free-pool row enters `_taken`, so neither a second kept task
    # nor a pull may use it again. Here nothing changed since the first choice, yet half the
    # tasks come back unplaced "not within the spread", and Place reports them so.
    ads = entitlement()
    region = Region().add(machine("m0", dc="dc1"), machine("m1", dc="dc2")).entitle(ads)
    web = job(count=4, placement=Placement(spread=Spread(level=FaultDomain.DC)))
    first = region.choose(web, ads)
    assert sorted(first.placements.values()) == [0, 0, 1, 1]
    again = region.choose(web, ads, keep=first.placements)
    assert again.unplaced == {}
    assert again.placements == first.placements


def test_a_big_region_explains_a_failure_from_a_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "_REASON_ROWS", 4)
    region = Region().add(*(machine(f"m{n}", memory=1024) for n in range(8)))
    # A record without its machine is a row of the index, but no machine to count.
    region.put_record("gone", allocation("gone"))
    region.entitle(entitlement())
    choice = region.choose(job(count=1, memory=4096), entitlement())
    (reason,) = set(choice.unplaced.values())
    assert reason.startswith("no machine fits: in a sample of 4 of 8 machines, 4 of 4 machines:")
    assert "insufficient memory" in reason
