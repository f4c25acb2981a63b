"""The choice cache: machine-rule results per job signature, kept current as the index changes."""

from __future__ import annotations

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.model import Constraint, ConstraintOp, MachineState, Placement


def counters(region: Region) -> tuple[int, int]:
    return region.cache.hits, region.cache.misses


def test_hit_ratio_rises_on_repeated_jobs() -> None:
    ads = entitlement()
    region = Region().add(*(machine(f"m{n}", msb=f"msb{n % 2}", memory=65536) for n in range(4)))
    region.entitle(ads)
    ratios = []
    for n in range(20):
        region.place(job(f"j{n}", count=2), ads)
        ratios.append(region.cache.hit_ratio)
    assert ratios == sorted(ratios)
    assert ratios[-1] > 0.85
    # Only the first job built lists: the entitlement's machines and the pool of each MSB.
    assert region.cache.misses == 3
    # A job with other machine rules is another signature: its first choice misses.
    misses = region.cache.misses
    zone = Placement(constraints=[Constraint(attribute="zone", op=ConstraintOp.EXISTS)])
    region.choose(job("other", count=1, placement=zone), ads)
    assert region.cache.misses > misses


def test_a_machine_joining_the_entitlement_is_appended() -> None:
    ads = entitlement()
    region = Region().add(machine("owned", memory=1024), machine("pool", memory=8192))
    region.entitle(ads)
    region.put_record("owned", allocation("owned", owner="ads"))
    # Fills the owned machine and grows into the pool: both lists are cached now.
    first = region.place(job("first", count=2), ads)
    assert region.ids(first.joined) == ["pool"]
    hits, misses = counters(region)
    # The joined machine is in the cached list of the entitlement's machines: no rebuild.
    second = region.choose(job("second", count=1), ads)
    assert region.ids(second.placements.values()) == ["pool"]
    assert second.joined == set()
    assert counters(region) == (hits + 1, misses)


def test_a_joining_machine_that_fails_the_rules_is_not_appended() -> None:
    ads = entitlement()
    region = Region().add(machine("m1", attributes={"zone": "a"}), machine("m2"))
    region.entitle(ads)
    zone = Placement(constraints=[Constraint(attribute="zone", op=ConstraintOp.EXISTS)])
    region.choose(job("zoned", count=1, placement=zone), ads)
    region.put_record("m2", allocation("m2", owner="ads"))
    region.put_record("m1", allocation("m1", owner="ads"))
    choice = region.choose(job("zoned", count=4, placement=zone), ads)
    assert region.ids(choice.placements.values()) == ["m1"] * 4


def test_a_machine_going_down_drops_it() -> None:
    ads = entitlement()
    region = Region().add(machine("a", memory=2048), machine("b", memory=8192)).entitle(ads)
    region.put_record("a", allocation("a", owner="ads"))
    region.put_record("b", allocation("b", owner="ads"))
    assert region.ids(region.choose(job(count=1), ads).placements.values()) == ["a"]
    misses = region.cache.misses
    region.add(machine("a", memory=2048, state=MachineState.DOWN))
    choice = region.choose(job(count=1), ads)
    assert region.ids(choice.placements.values()) == ["b"]
    assert region.cache.misses == misses + 1


def test_a_new_pool_machine_is_seen() -> None:
    ads = entitlement()
    region = Region().add(machine("roomy", memory=8192)).entitle(ads)
    assert region.ids(region.choose(job(count=1), ads).placements.values()) == ["roomy"]
    region.add(machine("tight", memory=1024))
    assert region.ids(region.choose(job(count=1), ads).placements.values()) == ["tight"]
    # A machine changing (its attributes here) is seen too.
    zone = Placement(constraints=[Constraint(attribute="zone", op=ConstraintOp.EQ, value="a")])
    assert region.choose(job(count=1, placement=zone), ads).placements == {}
    region.add(machine("roomy", memory=8192, attributes={"zone": "a"}))
    assert region.ids(region.choose(job(count=1, placement=zone), ads).placements.values()) == [
        "roomy"
    ]


def test_a_machine_leaving_the_entitlement_returns_to_its_pool_list() -> None:
    ads = entitlement()
    region = Region().add(machine("a"), machine("b", msb="msb2")).entitle(ads, entitlement("ml"))
    region.put_record("a", allocation("a", owner="ml"))
    assert region.ids(region.choose(job(count=1), ads).placements.values()) == ["b"]
    # The idle machine goes back to the free pool: the next choice may take it again.
    region.put_record("a", allocation("a"))
    choice = region.choose(job(count=2), ads)
    assert region.ids(choice.placements.values()) == ["a", "b"]
    assert region.ids(choice.joined) == ["a", "b"]


def test_a_changed_entitlement_drops_its_entries() -> None:
    region = Region().add(machine("m1", dc="dc1"), machine("m2", dc="dc2"))
    region.entitle(entitlement(allowed_dcs=["dc1"]))
    region.put_record("m1", allocation("m1", owner="ads"))
    region.put_record("m2", allocation("m2", owner="ads"))
    ads = region.index.entitlement("ads")
    assert ads is not None
    assert region.ids(region.choose(job(count=1), ads).placements.values()) == ["m1"]
    widened = entitlement(allowed_dcs=["dc2"])
    region.entitle(widened)
    assert region.ids(region.choose(job(count=1), widened).placements.values()) == ["m2"]


def test_replicas_pull_from_their_own_share_of_the_pool_first() -> None:
    machines = [machine(f"m{n:02}", memory=4096) for n in range(60)]
    regions = {replica: Region(replica).add(*machines) for replica in ("alloc-a", "alloc-b")}
    chosen = {}
    for replica, region in regions.items():
        region.entitle(entitlement())
        region.cache.set_replicas(regions)
        choice = region.choose(job(count=20, memory=4096), entitlement())
        chosen[replica] = set(region.ids(choice.joined))
    # Alike machines, both growing the entitlement at once: no machine is pulled by both (in
    # one order for both, or two random ones, they would share about seven).
    assert len(chosen["alloc-a"]) == len(chosen["alloc-b"]) == 20
    assert not chosen["alloc-a"] & chosen["alloc-b"]


def test_a_replica_past_its_share_takes_its_second_choices_from_the_owners_last() -> None:
    machines = [machine(f"m{n:02}", memory=4096) for n in range(90)]
    replicas = ("alloc-a", "alloc-b", "alloc-c")
    regions = {replica: Region(replica).add(*machines) for replica in replicas}
    wanted = {"alloc-a": 10, "alloc-b": 45, "alloc-c": 10}
    chosen = {}
    for replica, region in regions.items():
        region.entitle(entitlement())
        region.cache.set_replicas(replicas)
        choice = region.choose(job(count=wanted[replica], memory=4096), entitlement())
        chosen[replica] = set(region.ids(choice.joined))
    # b needs more than its third of the pool: what it takes from a's and c's shares are the
    # machines their owners would take last (at random, it would meet about a third of them).
    assert {replica: len(ids) for replica, ids in chosen.items()} == wanted
    assert not chosen["alloc-b"] & (chosen["alloc-a"] | chosen["alloc-c"])


def test_a_pool_machine_that_stops_meeting_a_constraint_is_not_chosen() -> None:
    # A pull from a free-pool list does not apply the list's own checks again: the list has to
    # go when one of its machines changes.
    ads = entitlement()
    region = Region().add(machine("m1", attributes={"zone": "a"}), machine("m2")).entitle(ads)
    zone = Placement(constraints=[Constraint(attribute="zone", op=ConstraintOp.EQ, value="a")])
    chosen = region.choose(job(count=1, placement=zone), ads).placements.values()
    assert region.ids(chosen) == ["m1"]
    region.add(machine("m1", attributes={"zone": "b"}))
    assert region.choose(job(count=1, placement=zone), ads).placements == {}
