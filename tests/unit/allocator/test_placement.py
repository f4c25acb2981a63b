"""Placement as pure functions: the hard rules, the ranking, and the reasons people read."""

from __future__ import annotations

import pytest

from tests.support.allocator_builders import candidate, entitlement, job, machine
from tether.allocator.placement import choose, explain, matches, predicate_text
from tether.model import (
    Constraint,
    ConstraintOp,
    FaultDomain,
    MachineState,
    Placement,
    Preference,
    Resources,
    Spread,
)

# --- constraints -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("constraint", "attributes", "expected"),
    [
        (Constraint(attribute="zone", op=ConstraintOp.EQ, value="a"), {"zone": "a"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.EQ, value="a"), {"zone": "b"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.EQ, value="a"), {}, False),
        (Constraint(attribute="zone", op=ConstraintOp.NE, value="a"), {"zone": "b"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.NE, value="a"), {"zone": "a"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.NE, value="a"), {}, True),
        (Constraint(attribute="zone", op=ConstraintOp.IN, values=["a", "b"]), {"zone": "b"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.IN, values=["a", "b"]), {"zone": "c"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.IN, values=["a"]), {}, False),
        (Constraint(attribute="zone", op=ConstraintOp.NOT_IN, values=["a"]), {"zone": "b"}, True),
        (Constraint(attribute="zone", op=ConstraintOp.NOT_IN, values=["a"]), {"zone": "a"}, False),
        (Constraint(attribute="zone", op=ConstraintOp.NOT_IN, values=["a"]), {}, True),
        (Constraint(attribute="ssd", op=ConstraintOp.EXISTS), {"ssd": ""}, True),
        (Constraint(attribute="ssd", op=ConstraintOp.EXISTS), {"hdd": "1"}, False),
        # Numeric, not lexicographic: "10" >= "9".
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {"cores": "10"}, True),
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {"cores": "8.5"}, False),
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {"cores": "many"}, False),
        (Constraint(attribute="cores", op=ConstraintOp.GE, value="9"), {}, False),
        (Constraint(attribute="cores", op=ConstraintOp.LE, value="9"), {"cores": "10"}, False),
        (Constraint(attribute="cores", op=ConstraintOp.LE, value="9"), {"cores": "9"}, True),
        (Constraint(attribute="cores", op=ConstraintOp.LE, value="9"), {"cores": "-1e3"}, True),
    ],
)
def test_constraint_ops(constraint: Constraint, attributes: dict[str, str], expected: bool) -> None:
    assert matches(constraint, attributes) is expected


def test_predicate_text() -> None:
    assert predicate_text(Constraint(attribute="zone", op=ConstraintOp.EQ, value="a")) == (
        "zone == a"
    )
    assert predicate_text(Constraint(attribute="zone", op=ConstraintOp.IN, values=["a", "b"])) == (
        "zone in [a, b]"
    )
    assert predicate_text(Constraint(attribute="ssd", op=ConstraintOp.EXISTS)) == "ssd exists"


def test_hard_constraints_filter_machines() -> None:
    machines = [
        candidate(machine("m1", attributes={"zone": "a", "cores": "16"})),
        candidate(machine("m2", attributes={"zone": "b", "cores": "16"})),
        candidate(machine("m3", attributes={"zone": "a", "cores": "4"})),
    ]
    placement = Placement(
        constraints=[
            Constraint(attribute="zone", op=ConstraintOp.EQ, value="a"),
            Constraint(attribute="cores", op=ConstraintOp.GE, value="8"),
        ]
    )
    choice = choose(
        machines, job(count=2, placement=placement), entitlement(), Resources(), [0, 1], {}
    )
    assert choice.placements == {0: "m1", 1: "m1"}
    assert choice.unplaced == {}


# --- machine filters -------------------------------------------------------------------------


def test_state_entitlement_dc_and_hardware_filters() -> None:
    machines = [
        candidate(machine("down", state=MachineState.DOWN)),
        candidate(machine("draining", state=MachineState.DRAINING)),
        candidate(machine("other-ent", entitlement="search")),
        candidate(machine("own-ent", entitlement="ads", msb="msb2")),
        candidate(machine("dc2", dc="dc2")),
        candidate(machine("gpu", hardware="gpu")),
        candidate(machine("free-pool")),
    ]
    placement = Placement(hardware_types=["std"])
    choice = choose(
        machines,
        job(count=2, placement=placement),
        entitlement(allowed_dcs=["dc1"]),
        Resources(),
        [0, 1],
        {},
    )
    # The two acceptable machines are in different MSBs, so the spread uses both.
    assert set(choice.placements.values()) == {"own-ent", "free-pool"}


def test_job_datacenters_and_entitlement_dcs_must_both_allow() -> None:
    machines = [candidate(machine(f"m-{dc}", dc=dc)) for dc in ("dc1", "dc2", "dc3")]
    chosen = choose(
        machines,
        job(count=1, placement=Placement(datacenters=["dc2", "dc3"])),
        entitlement(allowed_dcs=["dc1", "dc2"]),
        Resources(),
        [0],
        {},
    )
    assert chosen.placements == {0: "m-dc2"}


# --- ranking ---------------------------------------------------------------------------------


def test_three_tasks_on_four_msbs_land_on_three_msbs() -> None:
    machines = [
        candidate(machine(f"m{msb}-{n}", msb=f"msb{msb}", memory=16384))
        for msb in range(4)
        for n in range(2)
    ]
    choice = choose(machines, job(count=3), entitlement(), Resources(), [0, 1, 2], {})
    msbs = {machine_id.split("-")[0] for machine_id in choice.placements.values()}
    assert len(msbs) == 3


def test_spread_counts_tasks_already_placed() -> None:
    machines = [candidate(machine(f"m{msb}", msb=f"msb{msb}")) for msb in range(3)]
    # Tasks 0 and 1 already sit in msb0 and msb1: task 2 goes to msb2 though m0 sorts first.
    choice = choose(machines, job(), entitlement(), Resources(), [2], {0: "m0", 1: "m1"})
    assert choice.placements == {2: "m2"}


def test_spread_level_rack() -> None:
    machines = [
        candidate(machine("a", rack="r1")),
        candidate(machine("b", rack="r1")),
        candidate(machine("c", rack="r2")),
    ]
    placement = Placement(spread=Spread(level=FaultDomain.RACK))
    choice = choose(
        machines, job(count=2, placement=placement), entitlement(), Resources(), [0, 1], {}
    )
    assert sorted(choice.placements.values()) == ["a", "c"]


def test_preference_weight_beats_best_fit() -> None:
    machines = [
        candidate(machine("full", attributes={"ssd": "yes"}), Resources(memory_mib=2048)),
        candidate(machine("light", attributes={"ssd": "yes", "fast": "1"})),
        candidate(machine("heavy", attributes={"fast": "1"})),
    ]
    placement = Placement(
        preferences=[
            Preference(attribute="ssd", op=ConstraintOp.EQ, value="yes", weight=1),
            Preference(attribute="fast", op=ConstraintOp.EXISTS, weight=5),
        ]
    )
    choice = choose(
        machines, job(count=1, placement=placement), entitlement(), Resources(), [0], {}
    )
    # "light" satisfies both (weight 6) although "full" is the better fit.
    assert choice.placements == {0: "light"}


def test_best_fit_picks_the_fullest_machine_then_the_id() -> None:
    machines = [
        candidate(machine("roomy")),
        candidate(machine("tight"), Resources(memory_mib=2048)),
        candidate(machine("b-same"), Resources(memory_mib=3072)),
        candidate(machine("a-same"), Resources(memory_mib=3072)),
    ]
    choice = choose(machines, job(count=1), entitlement(), Resources(), [0], {})
    assert choice.placements == {0: "a-same"}
    # Ties on memory fall to CPU.
    machines = [candidate(machine("cpu-free")), candidate(machine("cpu-used"), Resources(cpu=3000))]
    assert choose(machines, job(count=1), entitlement(), Resources(), [0], {}).placements == {
        0: "cpu-used"
    }


def test_tasks_chosen_earlier_in_a_request_use_up_space() -> None:
    machines = [candidate(machine("m1", memory=2048))]
    choice = choose(machines, job(count=3), entitlement(), Resources(), [0, 1, 2], {})
    assert choice.placements == {0: "m1", 1: "m1"}
    assert list(choice.unplaced) == [2]
    assert choice.unplaced[2] == (
        "no machine fits: 1 of 1 machines: insufficient memory (need 1024 MiB, best has 0 MiB free)"
    )


# --- quota and reasons -----------------------------------------------------------------------


def test_quota_covers_usage_plus_new_tasks() -> None:
    machines = [candidate(machine(f"m{n}", msb=f"msb{n}", memory=8192)) for n in range(3)]
    choice = choose(
        machines,
        job(count=3),
        entitlement(memory=4096),
        Resources(memory_mib=2048),
        [0, 1, 2],
        {},
    )
    assert len(choice.placements) == 2
    assert choice.unplaced == {
        2: "entitlement ads quota exceeded: memory: 1024 MiB more, 4096 MiB of 4096 MiB in use"
    }


def test_no_fit_reason_counts_every_rule() -> None:
    machines = [
        candidate(machine("m1", memory=2048), Resources(memory_mib=1024)),
        candidate(machine("m2", memory=1024)),
        candidate(machine("m3", memory=4096), Resources(memory_mib=4096)),
        candidate(machine("m4", state=MachineState.DOWN)),
    ]
    choice = choose(machines, job(count=1, memory=2048), entitlement(), Resources(), [0], {})
    assert choice.unplaced == {
        0: "no machine fits: 3 of 4 machines: insufficient memory "
        "(need 2048 MiB, best has 1024 MiB free); 1 of 4: not up (1 down)"
    }


def test_no_machines_at_all() -> None:
    assert choose([], job(count=1), entitlement(), Resources(), [0], {}).unplaced == {
        0: "no machine fits: the region has no machines"
    }


# --- explain ---------------------------------------------------------------------------------


def test_explain_counts_what_each_rule_rejected() -> None:
    machines = [
        candidate(machine("m1", memory=1024)),
        candidate(machine("m2", memory=1024)),
        candidate(machine("m3", memory=1024)),
        candidate(machine("m4", state=MachineState.DOWN)),
    ]
    placement = Placement(constraints=[Constraint(attribute="zone", op=ConstraintOp.NE, value="x")])
    explanation = explain(
        machines, job(memory=2048, placement=placement), entitlement(), Resources()
    )
    assert explanation.considered == 4
    assert [(o.rule, o.rejected) for o in explanation.outcomes] == [
        ("state up", 1),
        ("entitlement free pool or ads", 0),
        ("constraint zone != x", 0),
        ("resources.cpu", 0),
        ("resources.memory", 3),
        ("quota", 0),
    ]
    memory = explanation.outcomes[4]
    assert memory.detail == "need 2048 MiB, best has 1024 MiB free"
    assert explanation.summary == "3 of 4 machines: insufficient memory; 1 of 4: not up"


def test_explain_summary_when_machines_fit() -> None:
    machines = [candidate(machine("m1")), candidate(machine("m2", memory=512))]
    explanation = explain(machines, job(), entitlement(), Resources())
    assert explanation.summary == "1 of 2 machines fit; 1 of 2 machines: insufficient memory"
    assert explain(machines[:1], job(), entitlement(), Resources()).summary == (
        "1 of 1 machines fit"
    )


def test_explain_reports_an_exhausted_quota() -> None:
    machines = [candidate(machine("m1")), candidate(machine("m2"))]
    explanation = explain(machines, job(), entitlement(memory=1024), Resources(memory_mib=512))
    quota = explanation.outcomes[-1]
    assert (quota.rule, quota.rejected) == ("quota", 2)
    assert quota.detail == (
        "entitlement ads quota exceeded: memory: 1024 MiB more, 512 MiB of 1024 MiB in use"
    )
    assert explanation.summary == "2 of 2 machines: entitlement quota exceeded"


def test_explain_datacenter_and_hardware_details() -> None:
    machines = [candidate(machine("m1", dc="dc2")), candidate(machine("m2", hardware="gpu"))]
    explanation = explain(
        machines,
        job(placement=Placement(hardware_types=["std"], datacenters=["dc1", "dc2"])),
        entitlement(allowed_dcs=["dc1"]),
        Resources(),
    )
    details = {o.rule: (o.rejected, o.detail) for o in explanation.outcomes}
    assert details["datacenter"] == (1, "entitlement ads allows dc1; job ads/web allows dc1, dc2")
    assert details["hardware type"] == (1, "allowed: std")
    assert explanation.summary == (
        "1 of 2 machines: datacenter not allowed; 1 of 2: hardware type not allowed"
    )
