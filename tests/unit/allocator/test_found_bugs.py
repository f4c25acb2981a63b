"""Placement bugs found by the allocator's unit tests, each the smallest input that shows it."""

from __future__ import annotations

import logging
from typing import Literal

import pytest

from tests.support.allocator_builders import Region, entitlement, job, machine
from tether.model import Affinity, ConstraintOp, Placement, Preference


@pytest.fixture(autouse=True)
def _quiet() -> None:
    # Unreadable records are logged as warnings; the assertions say what matters.
    logging.getLogger("tether.allocator.index").setLevel(logging.ERROR)


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
