"""Harvest machines in the index and placement: the usable share is the capacity placement
counts, only jobs that tolerate harvest go there, nothing goes to a machine being evicted, and a
report beyond the hardware is refused."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import orjson
import pytest
from pydantic import ValidationError

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.allocator.index.codes import EVICTING, HARVEST, REGULAR
from tether.model import Placement, Resources, to_json
from tether.model.machine import Harvest

SOON = datetime(2030, 1, 1, tzinfo=UTC)
TOLERANT = Placement(harvest=True)


def harvest(cpu: int, memory: int = 4096, evict_by: datetime | None = None) -> Harvest:
    return Harvest(usable=Resources(cpu=cpu, memory_mib=memory), evict_by=evict_by)


def test_a_report_beyond_the_hardware_is_refused_with_the_dimensions_named() -> None:
    with pytest.raises(ValidationError, match=r"harvest\.usable exceeds the machine's capacity"):
        machine("m1", harvest=harvest(cpu=5000, memory=1024))
    with pytest.raises(ValidationError, match="cpu 5000 millicores of 4000 millicores"):
        machine("m1", harvest=harvest(cpu=5000))
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        harvest(cpu=-1)
    assert machine("m1", harvest=harvest(cpu=1000)).usable() == Resources(cpu=1000, memory_mib=4096)
    assert machine("m1").usable() == machine("m1").capacity


def test_the_usable_share_is_the_capacity_placement_counts() -> None:
    ads = entitlement("ads")
    region = Region().entitle(ads).add(machine("m1", harvest=harvest(cpu=1000)))
    row = region.row("m1")
    assert region.index.capacity[row][0] == 1000
    assert region.index.harvest[row] == HARVEST
    # Two 500-millicore tasks fit the usable share; a third would fit the hardware, not it.
    choice = region.choose(job("web", count=3, cpu=500, placement=TOLERANT), ads, [0, 1, 2])
    assert len(choice.placements) == 2
    assert "cpu" in choice.unplaced[2]


def test_a_shrink_below_what_tasks_hold_leaves_no_room_and_a_growth_gives_it_back() -> None:
    ads = entitlement("ads")
    region = Region().entitle(ads).add(machine("m1", harvest=harvest(cpu=4000)))
    region.put_record("m1", allocation("m1", ("ads/old", 0, Resources(cpu=3000)), owner="ads"))
    region.add(machine("m1", harvest=harvest(cpu=2000)))
    row = region.row("m1")
    assert region.index.free[row][0] == -1000
    newcomer = job("new", count=1, cpu=100, placement=TOLERANT)
    assert region.choose(newcomer, ads, [0]).unplaced
    region.add(machine("m1", harvest=harvest(cpu=4000)))
    assert region.index.free[row][0] == 1000
    assert region.choose(newcomer, ads, [0]).placements == {0: row}


def test_only_jobs_that_tolerate_harvest_go_to_harvest_machines() -> None:
    ads = entitlement("ads")
    region = Region().entitle(ads).add(machine("h1", harvest=harvest(cpu=4000)), machine("r1"))
    plain = region.choose(job("plain", count=2, cpu=3000), ads, [0, 1])
    assert plain.placements == {0: region.row("r1")}
    assert "a harvest machine (the job does not set placement.harvest)" in plain.unplaced[1]
    tolerant = region.choose(job("ok", count=2, cpu=3000, placement=TOLERANT), ads, [0, 1])
    assert sorted(tolerant.placements.values()) == sorted([region.row("r1"), region.row("h1")])


def test_a_machine_being_evicted_takes_no_task() -> None:
    ads = entitlement("ads")
    region = Region().entitle(ads).add(machine("h1", harvest=harvest(cpu=4000, evict_by=SOON)))
    assert region.index.harvest[region.row("h1")] == EVICTING
    choice = region.choose(job("ok", count=1, placement=TOLERANT), ads, [0])
    assert "taken back by its host soon" in choice.unplaced[0]
    # The notice withdrawn, it is a harvest machine like any other.
    region.add(machine("h1", harvest=harvest(cpu=4000)))
    assert region.choose(job("ok", count=1, placement=TOLERANT), ads, [0]).placements
    region.add(machine("h1"))
    assert region.index.harvest[region.row("h1")] == REGULAR


def test_a_record_beyond_the_hardware_is_ignored_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    region = Region().add(machine("m1"))
    data = orjson.loads(to_json(machine("m1")))
    data["harvest"] = {"usable": {"cpu": 9000}}
    with caplog.at_level(logging.WARNING, logger="tether.allocator.index"):
        region.index.set_machine("m1", orjson.dumps(data))
    assert "ignoring machine m1: not a valid Machine" in caplog.text
    assert "harvest.usable exceeds the machine's capacity" in caplog.text
