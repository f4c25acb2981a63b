"""The entitlement tree's quota arithmetic: what each entitlement holds, borrows and lends, and
how much more it may take (pure; shared by the frontend, the scheduler's decider and the
simulator).

Every entitlement `n` has a guaranteed quota `Q`, a borrowing limit `B` (0 for a root) and a
reserve `R = Q - lending_limit` that it never lends. Its *consumption* `C` is what its own jobs
reserve plus what its children *occupy*, and it occupies `O = max(C, R)` of its parent: what it
uses, and at least the part of its quota it keeps for itself. A state is within quota when every
entitlement's consumption is at most `Q + B` (for a root, `Q`). Every dimension is independent,
so each is a tuple of integers over the tree's dimensions, and a job fits exactly when its
demand is at most its entitlement's headroom in every dimension.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from tether.model.entitlement import Entitlement
from tether.model.resources import ResourceOverflow, Resources, from_amounts, quantity_text

Vector = tuple[int, ...]
"""One amount per dimension of the tree, in `QuotaTree.dimensions` order."""

BASE_DIMENSIONS: Final = ("cpu", "memory", "disk", "gpus")


class TreeError(ValueError):
    """The entitlements do not form a tree (a cycle of parents)."""


@dataclass(slots=True)
class Node:
    """One entitlement in the tree, with its limits as vectors and its current consumption."""

    entitlement: Entitlement
    quota: Vector
    ceiling: Vector
    """Quota plus borrowing limit: the most its subtree may consume."""
    reserve: Vector
    """The part of its quota it never lends."""
    parent: str | None
    children: list[str] = field(default_factory=list)
    own: Vector = ()
    """What its own jobs reserve."""
    consumption: Vector = ()
    """`own` plus what its children occupy."""

    @property
    def name(self) -> str:
        return self.entitlement.name

    @property
    def occupancy(self) -> Vector:
        """What it occupies of its parent: its consumption, at least its reserve."""
        return tuple(map(max, self.consumption, self.reserve))


class QuotaTree:
    """The tree of every entitlement with what each reserves now (`use`, `release`)."""

    def __init__(self, entitlements: Iterable[Entitlement]) -> None:
        records = {entitlement.name: entitlement for entitlement in entitlements}
        labels = set(BASE_DIMENSIONS)
        for entitlement in records.values():
            for amounts in (entitlement.quota.resources, entitlement.borrowing_limit):
                labels.update(amounts.amounts())
        self.dimensions: tuple[str, ...] = tuple(sorted(labels))
        self.zero: Vector = (0,) * len(self.dimensions)
        self.nodes: dict[str, Node] = {}
        for name, entitlement in records.items():
            quota = self.vector(entitlement.quota.resources)
            borrowing = self.vector(entitlement.borrowing_limit)
            lendable = self.vector(entitlement.lendable)
            # A parent that does not exist (deleted, or not yet seen) makes a root: its quota
            # still bounds it, and it borrows from nobody.
            parent = entitlement.parent if entitlement.parent in records else None
            self.nodes[name] = Node(
                entitlement,
                quota,
                add(quota, borrowing) if parent is not None else quota,
                sub(quota, lendable),
                parent,
                own=self.zero,
                consumption=self.zero,
            )
        for node in self.nodes.values():
            if node.parent is not None:
                self.nodes[node.parent].children.append(node.name)
        self._check_acyclic()
        for node in self.nodes.values():
            if node.parent is None:
                self._start_empty(node)

    def vector(self, resources: Resources) -> Vector:
        """`resources` over the tree's dimensions. An extra resource that no quota of the tree
        names is not the quota's to limit: an ephemeral resource is a label the entitlement
        sets on machines for its own tasks, and the allocator checks it where it places."""
        amounts = resources.amounts()
        return tuple(amounts.get(label, 0) for label in self.dimensions)

    def resources(self, vector: Vector) -> Resources:
        """A vector as Resources (negative amounts count as 0)."""
        return from_amounts(
            {label: max(amount, 0) for label, amount in zip(self.dimensions, vector, strict=True)}
        )

    def path(self, name: str) -> Iterator[Node]:
        """The entitlement and its ancestors, up to its root."""
        node: Node | None = self.nodes[name]
        while node is not None:
            yield node
            node = None if node.parent is None else self.nodes[node.parent]

    def root_of(self, name: str) -> str:
        """The root of the entitlement's tree."""
        *_, root = self.path(name)
        return root.name

    def subtree(self, name: str) -> Iterator[Node]:
        """The entitlement and every descendant, parents before children."""
        stack = [name]
        while stack:
            node = self.nodes[stack.pop()]
            yield node
            stack.extend(reversed(node.children))

    def use(self, name: str, amount: Vector) -> None:
        """The entitlement's jobs reserve `amount` more."""
        self._change(name, amount)

    def release(self, name: str, amount: Vector) -> None:
        """The entitlement's jobs reserve `amount` less."""
        self._change(name, neg(amount))

    def headroom(self, name: str) -> Vector:
        """How much more the entitlement's own jobs may reserve now, per dimension (negative
        where it is already over, after a quota was lowered)."""
        nodes = list(self.path(name))
        return _room(nodes, [node.ceiling for node in nodes], [node.consumption for node in nodes])

    def guaranteed_headroom(self, name: str) -> Vector:
        """How much more the entitlement's own jobs could reserve if every other subtree gave
        back what it borrows: up to its quota, within its ancestors' quotas. What reclaiming
        lent quota can win for it."""
        nodes = list(self.path(name))
        consumption = [nodes[0].consumption]
        for child, node in itertools.pairwise(nodes):
            total = add(node.own, tuple(map(max, consumption[-1], child.reserve)))
            for other in node.children:
                if other != child.name:
                    sibling = self.nodes[other]
                    kept = tuple(map(min, sibling.consumption, sibling.quota))
                    total = add(total, tuple(map(max, kept, sibling.reserve)))
            consumption.append(total)
        return _room(nodes, [node.quota for node in nodes], consumption)

    def fits(self, name: str, demand: Vector) -> bool:
        """Whether the entitlement's jobs may reserve `demand` more now."""
        return _at_most(demand, self.headroom(name))

    def fits_guarantee(self, name: str, demand: Vector) -> bool:
        """Whether `demand` more would fit the entitlement were every other subtree to give
        back what it borrows: whether reclaiming lent quota can make room for it."""
        return _at_most(demand, self.guaranteed_headroom(name))

    def borrowed(self, name: str) -> Vector:
        """How far its subtree consumes beyond its quota: what it borrows from its siblings."""
        node = self.nodes[name]
        return tuple(max(c - q, 0) for c, q in zip(node.consumption, node.quota, strict=True))

    def lent(self, name: str) -> Vector:
        """The part of its idle lendable quota its siblings' borrowing uses: the siblings'
        borrowing beyond what their parent's own unassigned quota covers, shared among the
        idle lenders in proportion to what each could lend."""
        node = self.nodes[name]
        if node.parent is None:
            return self.zero
        parent = self.nodes[node.parent]
        siblings = [self.nodes[child] for child in parent.children]
        borrowing = _sum([self.borrowed(sibling.name) for sibling in siblings], self.zero)
        assigned = _sum([sibling.quota for sibling in siblings], self.zero)
        unassigned = tuple(
            max(q + b - o - a, 0)
            for q, b, o, a in zip(
                parent.quota, self.borrowed(parent.name), parent.own, assigned, strict=True
            )
        )
        from_lenders = tuple(max(b - u, 0) for b, u in zip(borrowing, unassigned, strict=True))
        idle = [self._idle_lendable(sibling) for sibling in siblings]
        total_idle = _sum(idle, self.zero)
        mine = self._idle_lendable(node)
        return tuple(
            (min(want, total) * share // total) if total else 0
            for want, total, share in zip(from_lenders, total_idle, mine, strict=True)
        )

    def dominant_share(self, name: str, change: Vector | None = None) -> float:
        """Its consumption's (plus `change`'s) largest fraction of its parent's quota (of its
        own quota for a root), divided by its weight: weighted dominant resource fairness among
        siblings."""
        node = self.nodes[name]
        capacity = node.quota if node.parent is None else self.nodes[node.parent].quota
        consumption = node.consumption if change is None else add(node.consumption, change)
        share = max(
            (c / total for c, total in zip(consumption, capacity, strict=True) if total > 0),
            default=0.0,
        )
        return share / node.entitlement.weight

    def shortfall(self, name: str, demand: Vector) -> list[str]:
        """One line per dimension in which `demand` exceeds the entitlement's headroom, e.g.
        "gpus: need 8, 4 free"; empty when it fits."""
        room = self.headroom(name)
        return [
            f"{label}: need {quantity_text(label, d)}, {max(r, 0)} free"
            for label, d, r in zip(self.dimensions, demand, room, strict=True)
            if d > r
        ]

    def over_quota(self) -> list[str]:
        """Every entitlement consuming beyond its ceiling, with the dimensions: empty in a state
        within quota."""
        found = []
        for node in self.nodes.values():
            over = [
                f"{label} {c} > {ceiling}"
                for label, c, ceiling in zip(
                    self.dimensions, node.consumption, node.ceiling, strict=True
                )
                if c > ceiling
            ]
            if over:
                found.append(f"{node.name}: {', '.join(over)}")
        return found

    def _idle_lendable(self, node: Node) -> Vector:
        lendable = sub(node.quota, node.reserve)
        idle = sub(node.quota, node.consumption)
        return tuple(max(min(most, free), 0) for most, free in zip(lendable, idle, strict=True))

    def _change(self, name: str, amount: Vector) -> None:
        node = self.nodes[name]
        node.own = add(node.own, amount)
        delta = amount
        while True:
            before = node.occupancy
            node.consumption = add(node.consumption, delta)
            if node.parent is None:
                return
            delta = sub(node.occupancy, before)
            if not any(delta):
                return
            node = self.nodes[node.parent]

    def _start_empty(self, node: Node) -> None:
        # Nobody reserves anything yet: each child occupies its unlent reserve.
        total = node.own
        for child in node.children:
            child_node = self.nodes[child]
            self._start_empty(child_node)
            total = add(total, child_node.occupancy)
        node.consumption = total

    def _check_acyclic(self) -> None:
        for node in self.nodes.values():
            seen = {node.name}
            parent = node.parent
            while parent is not None:
                if parent in seen:
                    raise TreeError(f"entitlement {node.name!r} is in a cycle of parents")
                seen.add(parent)
                parent = self.nodes[parent].parent


def add(a: Vector, b: Vector) -> Vector:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def sub(a: Vector, b: Vector) -> Vector:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def neg(a: Vector) -> Vector:
    return tuple(-x for x in a)


def _sum(vectors: Iterable[Vector], zero: Vector) -> Vector:
    total = zero
    for vector in vectors:
        total = add(total, vector)
    return total


def _at_most(demand: Vector, room: Vector) -> bool:
    return all(d <= r for d, r in zip(demand, room, strict=True))


def _room(path: list[Node], ceilings: list[Vector], consumptions: list[Vector]) -> Vector:
    """How much more the first node of `path` (a node and its ancestors, with each one's
    ceiling and consumption) may consume: within its own ceiling, and within what its parent
    has left beyond the part of its reserve it does not use yet."""
    room = sub(ceilings[-1], consumptions[-1])
    for index in range(len(path) - 2, -1, -1):
        consumption = consumptions[index]
        spare_reserve = tuple(
            max(r - c, 0) for r, c in zip(path[index].reserve, consumption, strict=True)
        )
        room = tuple(map(min, sub(ceilings[index], consumption), add(room, spare_reserve)))
    return room


def tree_problems(existing: Iterable[Entitlement], candidate: Entitlement) -> list[tuple[str, str]]:
    """What is wrong with creating or replacing `candidate` among the `existing` entitlements,
    as (field, message): its parent must exist and not descend from it, its quota must hold
    its children's and fit with its siblings' in its parent's, and it cannot borrow more than
    its parent could ever give it."""
    others = {entitlement.name: entitlement for entitlement in existing}
    others.pop(candidate.name, None)
    problems: list[tuple[str, str]] = []
    parent = others.get(candidate.parent) if candidate.parent is not None else None
    if candidate.parent is not None:
        if parent is None:
            problems.append(("parent", f"no entitlement is named '{candidate.parent}'"))
        else:
            chain = [candidate.name, parent.name]
            ancestor = parent.parent
            # `not in chain` ends the walk in a cycle of records that predate this check too.
            while ancestor in others and ancestor not in chain:
                chain.append(ancestor)
                ancestor = others[ancestor].parent
            if ancestor == candidate.name:
                cycle = " -> ".join([*chain, candidate.name])
                problems.append(("parent", f"would make a cycle of parents: {cycle}"))
                return problems
    quota = candidate.quota.resources
    children = sorted(e.name for e in others.values() if e.parent == candidate.name)
    over = _exceeds([others[name].quota.resources for name in children], quota)
    if children and over:
        problems.append(
            (
                "quota.resources",
                f"its children ({', '.join(children)}) are guaranteed more than this quota: "
                + "; ".join(over),
            )
        )
    if parent is not None:
        family = sorted(e.name for e in others.values() if e.parent == parent.name)
        quotas = [quota, *(others[name].quota.resources for name in family)]
        over = _exceeds(quotas, parent.quota.resources)
        if over:
            names = ", ".join(sorted([candidate.name, *family]))
            problems.append(
                (
                    "quota.resources",
                    f"the children of '{parent.name}' ({names}) would be guaranteed more than "
                    f"its quota: " + "; ".join(over),
                )
            )
        over = _exceeds([quota, candidate.borrowing_limit], parent.quota.resources)
        if over:
            problems.append(
                (
                    "borrowing_limit",
                    f"quota plus borrowing limit exceed the quota of its parent '{parent.name}', "
                    "which bounds its whole subtree: " + "; ".join(over),
                )
            )
    return problems


def _exceeds(amounts: Iterable[Resources], capacity: Resources) -> list[str]:
    """One line per dimension in which `amounts` together exceed `capacity`."""
    total = Resources()
    try:
        for amount in amounts:
            total = total + amount
    except ResourceOverflow as exc:
        return [f"{dimension}: beyond any quota" for dimension in exc.dimensions]
    return total.shortfall(capacity)
