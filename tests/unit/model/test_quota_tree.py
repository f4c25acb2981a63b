"""The quota tree: consumption, headroom, borrowing and lending, against the definitions."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.model import Entitlement, Quota, Resources
from tether.model.quota_tree import QuotaTree, TreeError, Vector, add, tree_problems

DIMENSIONS = ("cpu", "gpus")


def resources(cpu: int, gpus: int) -> Resources:
    return Resources(cpu=cpu, gpus=gpus)


def entitlement(name: str, parent: str | None = None, **fields: Any) -> Entitlement:
    quota = fields.pop("quota", (0, 0))
    limits: dict[str, Any] = {}
    if "borrowing" in fields:
        limits["borrowing_limit"] = resources(*fields.pop("borrowing"))
    if "lending" in fields:
        limits["lending_limit"] = resources(*fields.pop("lending"))
    return Entitlement(
        name=name, parent=parent, quota=Quota(resources=resources(*quota)), **limits, **fields
    )


def vector(tree: QuotaTree, cpu: int = 0, gpus: int = 0) -> Vector:
    found = tree.vector(resources(cpu, gpus))
    assert found is not None
    return found


def picked(tree: QuotaTree, amounts: Vector) -> tuple[int, int]:
    """The cpu and gpus of a vector."""
    by_label = dict(zip(tree.dimensions, amounts, strict=True))
    return by_label["cpu"], by_label["gpus"]


@st.composite
def trees(draw: st.DrawFn) -> list[Entitlement]:
    """Up to 7 entitlements in one or two trees, each child's quota carved out of what its
    parent has not given its other children, limits within the rules."""
    count = draw(st.integers(1, 7))
    made: list[Entitlement] = []
    left: dict[str, tuple[int, int]] = {}
    for index in range(count):
        name = f"e{index}"
        parents = [e.name for e in made]
        parent = draw(st.none() | st.sampled_from(parents)) if parents else None
        if parent is None:
            quota = (draw(st.integers(0, 40)), draw(st.integers(0, 8)))
            borrowing = (0, 0)
        else:
            spare = left[parent]
            quota = (draw(st.integers(0, spare[0])), draw(st.integers(0, spare[1])))
            left[parent] = (spare[0] - quota[0], spare[1] - quota[1])
            ceiling = next(e for e in made if e.name == parent).quota.resources
            borrowing = (
                draw(st.integers(0, ceiling.cpu - quota[0])),
                draw(st.integers(0, ceiling.gpus - quota[1])),
            )
        lending = draw(
            st.none()
            | st.tuples(st.integers(0, quota[0]), st.integers(0, quota[1])).map(
                lambda amounts: resources(*amounts)
            )
        )
        made.append(
            Entitlement(
                name=name,
                parent=parent,
                quota=Quota(resources=resources(*quota)),
                borrowing_limit=resources(*borrowing),
                lending_limit=lending,
                weight=draw(st.integers(1, 4)),
            )
        )
        left[name] = quota
    return made


def consumption_by_definition(tree: QuotaTree, name: str) -> Vector:
    """C(n) = own(n) + sum over children of max(C(c), R(c))."""
    node = tree.nodes[name]
    total = node.own
    for child in node.children:
        total = add(
            total,
            tuple(map(max, consumption_by_definition(tree, child), tree.nodes[child].reserve)),
        )
    return total


def within_quota(tree: QuotaTree) -> bool:
    return not tree.over_quota()


demands = st.tuples(st.integers(0, 30), st.integers(0, 6))


@settings(max_examples=300, deadline=None)
@given(entitlements=trees(), data=st.data())
def test_admitting_only_what_fits_never_exceeds_a_quota_and_fits_is_exact(
    entitlements: list[Entitlement], data: st.DataObject
) -> None:
    tree = QuotaTree(entitlements)
    names = [e.name for e in entitlements]
    for _ in range(12):
        name = data.draw(st.sampled_from(names))
        if data.draw(st.booleans()):
            demand = vector(tree, *data.draw(demands))
            trial = copy.deepcopy(tree)
            trial.use(name, demand)
            # Exact: what fits keeps every quota, what does not fit breaks one.
            assert tree.fits(name, demand) == within_quota(trial)
            if tree.fits(name, demand):
                tree.use(name, demand)
        else:
            own = picked(tree, tree.nodes[name].own)
            amount = vector(
                tree, data.draw(st.integers(0, own[0])), data.draw(st.integers(0, own[1]))
            )
            tree.release(name, amount)
        assert within_quota(tree)
        for each in names:
            assert tree.nodes[each].consumption == consumption_by_definition(tree, each)


@settings(max_examples=300, deadline=None)
@given(entitlements=trees(), data=st.data())
def test_reclaiming_what_others_borrow_wins_the_guaranteed_headroom(
    entitlements: list[Entitlement], data: st.DataObject
) -> None:
    tree = QuotaTree(entitlements)
    names = [e.name for e in entitlements]
    for _ in range(10):
        name = data.draw(st.sampled_from(names))
        demand = vector(tree, *data.draw(demands))
        if tree.fits(name, demand):
            tree.use(name, demand)
    name = data.draw(st.sampled_from(names))
    room = tree.guaranteed_headroom(name)
    # Preempt every job of every subtree beside the entitlement's path that borrows.
    path = {node.name for node in tree.path(name)}
    reclaimed = copy.deepcopy(tree)
    for ancestor in list(tree.path(name))[1:]:
        for child in ancestor.children:
            if child in path or not any(tree.borrowed(child)):
                continue
            for node in list(reclaimed.subtree(child)):
                reclaimed.release(node.name, node.own)
    assert within_quota(reclaimed)
    if all(r >= 0 for r in room):
        assert reclaimed.fits(name, room)


def test_a_child_borrows_its_siblings_idle_quota_up_to_its_limit() -> None:
    tree = QuotaTree(
        [
            entitlement("org", quota=(10, 0)),
            entitlement("a", "org", quota=(6, 0), borrowing=(3, 0)),
            entitlement("b", "org", quota=(4, 0)),
        ]
    )
    assert picked(tree, tree.headroom("a")) == (9, 0)
    assert picked(tree, tree.headroom("b")) == (4, 0)
    tree.use("a", vector(tree, cpu=8))
    assert picked(tree, tree.borrowed("a")) == (2, 0)
    assert picked(tree, tree.lent("b")) == (2, 0)
    # b keeps its guarantee: reclaiming would win all of it back.
    assert picked(tree, tree.headroom("b")) == (2, 0)
    assert picked(tree, tree.guaranteed_headroom("b")) == (4, 0)
    assert tree.fits_guarantee("b", vector(tree, cpu=4))
    assert not tree.fits_guarantee("b", vector(tree, cpu=5))
    assert not tree.fits("a", vector(tree, cpu=2))


def test_a_lending_limit_keeps_the_rest_of_the_quota_for_its_owner() -> None:
    tree = QuotaTree(
        [
            entitlement("org", quota=(10, 0)),
            entitlement("a", "org", quota=(6, 0), borrowing=(4, 0)),
            entitlement("b", "org", quota=(4, 0), lending=(1, 0)),
        ]
    )
    assert picked(tree, tree.headroom("a")) == (7, 0)
    tree.use("a", vector(tree, cpu=7))
    assert picked(tree, tree.headroom("b")) == (3, 0)
    assert picked(tree, tree.lent("b")) == (1, 0)


def test_a_parent_bounds_its_subtree_and_its_own_unassigned_quota_is_lent_first() -> None:
    tree = QuotaTree(
        [
            entitlement("org", quota=(10, 2)),
            entitlement("a", "org", quota=(4, 1), borrowing=(6, 1)),
            entitlement("b", "org", quota=(4, 1)),
        ]
    )
    tree.use("a", vector(tree, cpu=6))
    # The org's 2 unassigned cpus cover a's borrowing: b lends nothing yet.
    assert picked(tree, tree.lent("b")) == (0, 0)
    tree.use("a", vector(tree, cpu=2))
    assert picked(tree, tree.lent("b")) == (2, 0)
    assert picked(tree, tree.headroom("a")) == (2, 2)
    assert tree.dominant_share("a") == 8 / 10


def test_dominant_share_is_divided_by_weight() -> None:
    tree = QuotaTree(
        [
            entitlement("org", quota=(10, 4)),
            entitlement("a", "org", quota=(5, 2), weight=2),
            entitlement("b", "org", quota=(5, 2)),
        ]
    )
    tree.use("a", vector(tree, cpu=2, gpus=2))
    tree.use("b", vector(tree, cpu=2, gpus=1))
    assert tree.dominant_share("a") == pytest.approx(0.5 / 2)
    assert tree.dominant_share("b") == pytest.approx(0.25)


def test_an_extra_resource_no_quota_names_is_not_the_quotas_to_limit() -> None:
    tree = QuotaTree([entitlement("org", quota=(10, 0))])
    assert "extra/fpga" not in tree.dimensions
    assert tree.vector(Resources(cpu=3, extra={"fpga": 1})) == vector(tree, cpu=3)
    assert tree.fits("org", tree.vector(Resources(cpu=3, extra={"fpga": 1})))
    assert tree.shortfall("org", vector(tree, cpu=12, gpus=1)) == [
        "cpu: need 12 millicores, 10 free",
        "gpus: need 1, 0 free",
    ]


def test_a_cycle_of_parents_is_refused() -> None:
    with pytest.raises(TreeError, match="cycle"):
        QuotaTree([entitlement("a", "b"), entitlement("b", "a")])


def test_tree_problems_name_the_field_and_the_entitlements() -> None:
    existing = [
        entitlement("org", quota=(10, 2)),
        entitlement("a", "org", quota=(6, 1)),
        entitlement("sub", "a", quota=(5, 0)),
    ]
    assert tree_problems(existing, entitlement("b", "org", quota=(4, 1))) == []
    assert tree_problems(existing, entitlement("b", "nope")) == [
        ("parent", "no entitlement is named 'nope'")
    ]
    assert tree_problems(existing, entitlement("org", "sub", quota=(10, 2))) == [
        ("parent", "would make a cycle of parents: org -> sub -> a -> org")
    ]
    [(field, message)] = tree_problems(existing, entitlement("b", "org", quota=(5, 0)))
    assert field == "quota.resources"
    assert "the children of 'org' (a, b) would be guaranteed more than its quota" in message
    assert "cpu: need 11 millicores, 10 free" in message
    [(field, message)] = tree_problems(existing, entitlement("a", "org", quota=(4, 1)))
    assert field == "quota.resources"
    assert "its children (sub) are guaranteed more than this quota" in message
    [(field, message)] = tree_problems(
        existing, entitlement("b", "org", quota=(2, 0), borrowing=(9, 0))
    )
    assert field == "borrowing_limit"
    assert "exceed the quota of its parent 'org'" in message
