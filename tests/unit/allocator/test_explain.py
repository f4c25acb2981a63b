"""Explain: what every hard rule rejected, how many machines each preference matches, and the
rank of the machines holding the job's tasks."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.allocator.rules.preferences import effective_weights
from tether.model import (
    Affinity,
    Constraint,
    ConstraintOp,
    MachineState,
    Placement,
    Preference,
    Resources,
)
from tether.model.machine import Harvest

SOON = datetime(2030, 1, 1, tzinfo=UTC)
WHOLE = Resources(cpu=4000, memory_mib=4096)
"""All of a `machine()`'s capacity."""


def test_every_rule_counts_what_it_rejected() -> None:
    ads = entitlement(allowed_dcs=["dc1"])
    region = Region().add(
        machine("down", state=MachineState.DOWN),
        machine(
            "evicted", harvest=Harvest(usable=Resources(cpu=4000, memory_mib=4096), evict_by=SOON)
        ),
        machine("harvest", harvest=Harvest(usable=Resources(cpu=4000, memory_mib=4096))),
        machine("far", dc="dc2"),
        machine("gpu", hardware="gpu"),
        machine("zone-b", attributes={"zone": "b"}),
        machine("theirs"),
        machine("broken"),
        machine("db-host"),
        machine("small", memory=512),
        machine("fits-1"),
        machine("fits-2", memory=8192),
    )
    region.entitle(ads, entitlement("ml"))
    region.put_record("theirs", allocation("theirs", owner="ml"))
    region.put_record("broken", b"not json")
    region.put_record("db-host", allocation("db-host", ("ads/db", 0, Resources(cpu=1))))
    placement = Placement(
        hardware_types=["std"],
        constraints=[Constraint(attribute="zone", op=ConstraintOp.NE, value="b")],
        affinities=[Affinity(job="ads/db", anti=True)],
    )
    explanation = region.explain(job(placement=placement), ads)
    assert explanation.considered == 12
    assert [(o.rule, o.rejected) for o in explanation.outcomes] == [
        ("state up", 1),
        ("no eviction notice", 1),
        ("not a harvest machine", 1),
        ("datacenter", 1),
        ("hardware type", 1),
        ("constraint zone != b", 1),
        ("entitlement free pool or ads", 1),
        ("allocation record readable", 1),
        ("anti-affinity ads/db (machine)", 1),
        ("resources.cpu", 0),
        ("resources.memory", 1),
        ("quota", 0),
    ]
    assert explanation.fitting == 2
    assert sum(o.rejected for o in explanation.outcomes) + explanation.fitting == 12
    details = {o.rule: o.detail for o in explanation.outcomes}
    assert details["state up"] == "1 down"
    assert details["datacenter"] == "entitlement ads allows dc1"
    assert details["hardware type"] == "allowed: std"
    assert details["entitlement free pool or ads"] == "assigned to ml"
    # (The memory rule's detail: see test_regressions.)
    assert explanation.summary.startswith("2 of 12 machines fit; 1 of 12 machines: ")


def test_exhausted_quota_rejects_every_machine() -> None:
    ads = entitlement(memory=1024)
    region = Region().add(machine("m1"), machine("m2")).entitle(ads)
    region.place(job("old", count=1), ads)
    explanation = region.explain(job(), ads)
    quota = explanation.outcomes[-1]
    assert (quota.rule, quota.rejected) == ("quota", 2)
    assert quota.detail == (
        "entitlement ads quota exceeded: memory: 1024 MiB more, 1024 MiB of 1024 MiB in use"
    )
    assert explanation.fitting == 0
    assert explanation.summary == "2 of 2 machines: entitlement quota exceeded"


def test_preferences_count_matching_machines_with_their_weights() -> None:
    region = Region().add(
        machine("m1", attributes={"ssd": "1", "gen": "5"}),
        machine("m2", attributes={"ssd": "1", "gen": "3"}),
        machine("m3", attributes={"gen": "5"}),
        machine("full", memory=512, attributes={"ssd": "1", "gen": "9"}),
    )
    preferences = [
        Preference(attribute="ssd", op=ConstraintOp.EXISTS, weight=2),
        Preference(attribute="gen", op=ConstraintOp.GE, value="4", weight=7),
    ]
    web = job(placement=Placement(preferences=preferences))
    explanation = region.explain(web, entitlement())
    # Counted over the machines that fit ("full" does not).
    assert [(p.rule, p.weight, p.matching) for p in explanation.preferences] == [
        ("ssd exists", 16, 2),
        ("gen >= 4", 7, 2),
    ]


def test_effective_weights_make_each_rule_outweigh_all_later_ones() -> None:
    preferences = [
        Preference(attribute=name, op=ConstraintOp.EXISTS, weight=weight)
        for name, weight in (("a", 1), ("b", 100), ("c", 100), ("d", 3))
    ]
    weights = effective_weights(job(placement=Placement(preferences=preferences)))
    assert weights == [40804, 40400, 400, 3]
    for position, weight in enumerate(weights):
        assert weight > sum(weights[position + 1 :])


def test_chosen_machines_with_their_rank() -> None:
    ads = entitlement()
    region = Region().add(
        machine("full", msb="msb1", memory=1024, attributes={"ssd": "1"}),
        machine("roomy", msb="msb2", memory=8192, attributes={"ssd": "1"}),
        machine("plain", msb="msb3", memory=2048),
    )
    region.entitle(ads)
    preferences = [Preference(attribute="ssd", op=ConstraintOp.EXISTS)]
    web = job(count=2, placement=Placement(preferences=preferences))
    region.place(web, ads)
    assert sorted(region.placements(web).values()) == ["full", "roomy"]
    explanation = region.explain(web, ads)
    assert explanation.entitlement_machines == 2
    assert [(c.machine, c.tasks, c.rank, c.preferences) for c in explanation.chosen] == [
        # A full machine does not fit one more task: rank 0.
        ("full", [explanation.chosen[0].tasks[0]], 0, ["ssd exists"]),
        # The entitlement's own machine that matches the preference ranks first.
        ("roomy", [explanation.chosen[1].tasks[0]], 1, ["ssd exists"]),
    ]
    assert sorted(t for c in explanation.chosen for t in c.tasks) == [0, 1]
    assert explanation.summary == "2 of 3 machines fit; 1 of 3 machines: insufficient memory"


def test_explain_for_a_job_without_tasks() -> None:
    region = Region().add(machine("m1"))
    explanation = region.explain(job(), entitlement())
    assert explanation.chosen == []
    assert explanation.entitlement_machines == 0
    assert explanation.summary == "1 of 1 machines fit"
    assert region.explain(job(memory=8192), entitlement()).summary == (
        "1 of 1 machines: insufficient memory"
    )
    assert Region().explain(job(), entitlement()).summary == "the region has no machines"
