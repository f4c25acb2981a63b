"""Placement over ephemeral resources: the allocator places a task only where its entitlement
set enough of each label it asks for, counting what the entitlement's tasks hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.allocator_builders import Region, entitlement, job, machine
from tether.allocator.ephemeral import label_state
from tether.model import Constraint, ConstraintOp, Job, Placement
from tether.model.ephemeral import EphemeralResource, NodeSpec, ResourceGrant

NOW = datetime.now(UTC)


def resource(
    label: str,
    *grants: tuple[NodeSpec, int],
    owner: str = "ads",
    expires_at: datetime | None = None,
) -> EphemeralResource:
    return EphemeralResource(
        entitlement=owner,
        label=label,
        grants=[ResourceGrant(node_spec=spec, capacity=capacity) for spec, capacity in grants],
        expires_at=expires_at,
        created_at=NOW,
        updated_at=NOW,
    )


def on(machine_id: str) -> NodeSpec:
    return NodeSpec(machine=machine_id)


EVERY = NodeSpec()


def region(machines: int = 10) -> Region:
    return (
        Region()
        .add(*(machine(f"m{n}", msb=f"msb{n % 4}", memory=8192) for n in range(machines)))
        .entitle(entitlement("ads"), entitlement("other"))
    )


def small(name: str, count: int, label: str, *, gang: bool = False, amount: int = 1) -> Job:
    return job(name, count=count, memory=256, extra={label: amount}, placement=Placement(gang=gang))


def test_tasks_land_only_where_the_label_is_set() -> None:
    cluster = region().set_ephemeral(resource("gang", *((on(f"m{n}"), 1) for n in range(8))))
    choice = cluster.place(small("train", 8, "gang"), entitlement("ads"))
    assert sorted(cluster.placements(small("train", 8, "gang")).values()) == [
        f"m{n}" for n in range(8)
    ]
    assert not choice.unplaced


def test_a_gang_short_of_its_label_places_nothing_and_says_which() -> None:
    cluster = region().set_ephemeral(resource("gang", *((on(f"m{n}"), 1) for n in range(7))))
    choice = cluster.choose(small("train", 8, "gang", gang=True), entitlement("ads"))
    assert choice.placements == {}
    reason = choice.unplaced[0]
    assert "gang job: 7 of 8 tasks fit" in reason
    assert "insufficient ephemeral resource gang" in reason


def test_capacity_one_everywhere_never_doubles_up() -> None:
    cluster = region(6).set_ephemeral(resource("solo", (EVERY, 1)))
    anti = small("spread", 8, "solo")
    choice = cluster.place(anti, entitlement("ads"))
    machines = list(cluster.placements(anti).values())
    assert len(machines) == len(set(machines)) == 6
    assert set(choice.unplaced) == {6, 7}
    # What the placed tasks hold counts: a second job finds no machine with the label free.
    again = cluster.choose(small("more", 1, "solo"), entitlement("ads"))
    assert "insufficient ephemeral resource solo" in again.unplaced[0]


def test_a_pair_shares_the_one_machine_given_room_for_two() -> None:
    cluster = region().set_ephemeral(resource("pair", (on("m5"), 2)))
    cluster.place(small("pair", 2, "pair"), entitlement("ads"))
    assert set(cluster.placements(small("pair", 2, "pair")).values()) == {"m5"}


def test_another_entitlements_label_is_invisible() -> None:
    cluster = region().set_ephemeral(resource("gang", (EVERY, 4), owner="other"))
    choice = cluster.choose(small("train", 2, "gang"), entitlement("ads"))
    assert choice.placements == {}
    assert "entitlement ads has not set it" in choice.unplaced[0]
    # The owner's tasks see it.
    theirs = job("t", entitlement="other", count=2, memory=256, extra={"gang": 1})
    assert len(cluster.choose(theirs, entitlement("other")).placements) == 2


def test_a_machine_grant_wins_over_broad_ones_and_the_last_broad_one_wins() -> None:
    cluster = Region().entitle(entitlement("ads"))
    cluster.add(
        *(
            machine(f"m{n}", msb=f"msb{n}", attributes={"rack-kind": "fast" if n < 2 else "slow"})
            for n in range(4)
        )
    )
    fast = NodeSpec(
        constraints=[Constraint(attribute="rack-kind", op=ConstraintOp.EQ, value="fast")]
    )
    cluster.set_ephemeral(resource("slot", (EVERY, 1), (fast, 3), (on("m0"), 0)))
    placed = cluster.place(small("many", 20, "slot"), entitlement("ads"))
    where = list(cluster.placements(small("many", 20, "slot")).values())
    # m0: 0 (its own grant); m1: 3 (fast, after every); m2, m3: 1 each.
    assert sorted(where) == ["m1", "m1", "m1", "m2", "m3"]
    assert len(placed.unplaced) == 15


def test_an_expired_resource_has_no_capacity() -> None:
    cluster = region().set_ephemeral(
        resource("old", (EVERY, 5), expires_at=NOW - timedelta(seconds=1))
    )
    assert cluster.choose(small("late", 1, "old"), entitlement("ads")).placements == {}


def test_lowering_under_held_tasks_lets_no_more_in_until_they_go() -> None:
    cluster = region().set_ephemeral(resource("slot", (on("m1"), 3)))
    first = small("first", 3, "slot")
    cluster.place(first, entitlement("ads"))
    cluster.set_ephemeral(resource("slot", (on("m1"), 1)))
    assert cluster.choose(small("second", 1, "slot"), entitlement("ads")).placements == {}
    explanation = cluster.explain(small("second", 1, "slot"), entitlement("ads"))
    outcome = next(o for o in explanation.outcomes if o.rule == "ephemeral.slot")
    assert outcome.reason == "insufficient ephemeral resource slot"
    assert outcome.detail == "need 1, best has 0 free"


def test_a_label_machines_offer_is_theirs_until_the_entitlement_sets_its_own() -> None:
    cluster = Region().entitle(entitlement("ads", extra={"fpga": 10}))
    cluster.add(machine("f0", msb="a", extra={"fpga": 1}), machine("f1", msb="b"))
    wants = job("fpga", count=2, memory=256, extra={"fpga": 1})
    assert set(
        cluster.choose(wants, entitlement("ads", extra={"fpga": 10})).placements.values()
    ) == {cluster.row("f0")}
    cluster.set_ephemeral(resource("fpga", (on("f1"), 2)))
    chosen = cluster.choose(wants, entitlement("ads", extra={"fpga": 10})).placements
    assert set(chosen.values()) == {cluster.row("f1")}


def test_the_cluster_state_lists_machines_by_id_with_what_is_held() -> None:
    cluster = region(12).set_ephemeral(resource("slot", (EVERY, 1), (on("m3"), 2)))
    cluster.place(small("two", 2, "slot"), entitlement("ads"))
    record = cluster.index.ephemeral("ads", "slot")
    state = label_state(cluster.index, "ads", "slot", record, over_held=False, limit=0)
    assert [share.machine for share in state.machines] == sorted(f"m{n}" for n in range(12))
    assert sum(share.held for share in state.machines) == 2
    assert not state.truncated
    cut = label_state(cluster.index, "ads", "slot", record, over_held=False, limit=3)
    assert [share.machine for share in cut.machines] == ["m0", "m1", "m10"]
    assert cut.truncated
    # A proposal of 0 everywhere: only the machines holding the label, with their tasks.
    none = resource("slot", (EVERY, 0))
    over = label_state(cluster.index, "ads", "slot", none, over_held=True, limit=0)
    held = {share.machine: share.tasks for share in over.machines}
    placed = cluster.placements(small("two", 2, "slot"))
    assert held == {
        machine: [f"ads/two/{task}" for task, there in placed.items() if there == machine]
        for machine in set(placed.values())
    }
