"""What a job's tasks ask of its entitlement's ephemeral resources, and how much of each is
free on each machine: the capacity its grants give there less what the entitlement's tasks
hold (`tether.model.ephemeral` says which grant wins)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from tether.allocator.index import UP, AllocationIndex
from tether.allocator.rules.checks import I64, Mask, Rows
from tether.allocator.rules.predicates import matches
from tether.model import Entitlement, Resources
from tether.model.ephemeral import EphemeralResource
from tether.model.resources import EXTRA_PREFIX


@dataclass(frozen=True, slots=True)
class EphemeralNeed:
    """The ephemeral resources one task of a job asks for, in `resources.extra` order: a label
    is the entitlement's own when it has a record of it, and also when no machine offers a
    resource of that name (then it fits nowhere until the entitlement sets it)."""

    entitlement: str
    labels: tuple[str, ...]
    amounts: I64
    records: tuple[EphemeralResource | None, ...]
    now: datetime

    @classmethod
    def of(
        cls, index: AllocationIndex, entitlement: Entitlement, resources: Resources
    ) -> EphemeralNeed:
        name = entitlement.name
        wanted = []
        for label, amount in resources.extra.items():
            record = index.ephemeral(name, label)
            if record is not None or EXTRA_PREFIX + label not in index.dimension_of:
                wanted.append((label, amount, record))
        return cls(
            name,
            tuple(label for label, _, _ in wanted),
            np.array([amount for _, amount, _ in wanted], np.int64),
            tuple(record for _, _, record in wanted),
            datetime.now(UTC),
        )

    def free(self, index: AllocationIndex, rows: Rows) -> I64:
        """Per row, a column per label: how much of it is free (negative: over-held, after a
        capacity was lowered under running tasks)."""
        free = np.zeros((len(rows), len(self.labels)), np.int64)
        for column, (label, record) in enumerate(zip(self.labels, self.records, strict=True)):
            held = index.extra_held(self.entitlement, label)
            free[:, column] = capacity(index, record, rows, self.now) - by_row(held, rows)
        return free


def capacity(
    index: AllocationIndex, record: EphemeralResource | None, rows: Rows, now: datetime
) -> I64:
    """Per row, the capacity of the label that `record`'s grants give the machine."""
    amounts = np.zeros(len(rows), np.int64)
    if record is None or record.expired(now):
        return amounts
    for grant in record.broad_grants():
        covered = np.ones(len(rows), np.bool_)
        for constraint in grant.node_spec.constraints:
            covered &= matches(index, constraint, rows)
        amounts[covered] = grant.capacity
    machines = record.machine_grants()
    if machines:
        named = {
            index.row_of[machine]: amount
            for machine, amount in machines.items()
            if machine in index.row_of
        }
        if named:
            found, values = _lookup(named, rows)
            amounts[found] = values[found]
    return amounts


def by_row(amounts: Mapping[int, int], rows: Rows) -> I64:
    """`amounts` (row -> amount, few rows) spread over `rows`: 0 for the rows it lacks."""
    if not amounts:
        return np.zeros(len(rows), np.int64)
    found, values = _lookup(amounts, rows)
    return np.where(found, values, 0)


def _lookup(amounts: Mapping[int, int], rows: Rows) -> tuple[Mask, I64]:
    """Per row, whether `amounts` (not empty) has it, and its amount where it does."""
    keys = np.fromiter(amounts.keys(), np.intp, len(amounts))
    values = np.fromiter(amounts.values(), np.int64, len(amounts))
    order = np.argsort(keys)
    keys, values = keys[order], values[order]
    positions = np.minimum(np.searchsorted(keys, rows), len(keys) - 1)
    return keys[positions] == rows, values[positions]


@dataclass(frozen=True, slots=True)
class MachineShare:
    """One machine's capacity of a label and what the entitlement's tasks hold of it."""

    machine: str
    capacity: int
    held: int
    tasks: list[str]


@dataclass(frozen=True, slots=True)
class LabelState:
    label: str
    machines: list[MachineShare]
    truncated: bool


def label_state(
    index: AllocationIndex,
    entitlement: str,
    label: str,
    record: EphemeralResource | None,
    *,
    over_held: bool,
    limit: int,
) -> LabelState:
    """The machines where `record` (the label's, stored or proposed) gives capacity or the
    entitlement's tasks hold some, in machine id order: grants by attributes or for every
    machine count on the machines the entitlement reaches (its own and the free pool's).
    `over_held`: only the machines where the tasks hold more than the capacity, with them."""
    held = index.extra_held(entitlement, label)
    rows = set(held)
    if record is not None:
        rows.update(index.row_of[m] for m in record.machine_grants() if m in index.row_of)
        if record.broad_grants():
            rows.update(_reach(index, entitlement))
    listed = np.fromiter(rows, np.intp, len(rows))
    capacities = capacity(index, record, listed, datetime.now(UTC))
    holding = by_row(held, listed)
    shown = np.flatnonzero(holding > capacities if over_held else (capacities > 0) | (holding > 0))
    # Sorted by machine id once filtered: a catch-all grant reaches every free machine.
    ids = index.ids
    shown = np.array(sorted(shown.tolist(), key=lambda at: ids[int(listed[at])]), np.intp)
    truncated = 0 < limit < len(shown)
    if truncated:
        shown = shown[:limit]
    listed, capacities, holding = listed[shown], capacities[shown], holding[shown]
    holders = index.holders(entitlement, label) if over_held else {}
    return LabelState(
        label,
        [
            MachineShare(index.ids[row], amount, used, holders.get(row, []))
            for row, amount, used in zip(
                listed.tolist(), capacities.tolist(), holding.tolist(), strict=True
            )
        ],
        truncated,
    )


def _reach(index: AllocationIndex, entitlement: str) -> list[int]:
    """The rows the entitlement may place on: its own, and the free pool's that are up."""
    rows = list(index.owned_rows(index.owners.find(entitlement)))
    for msb in index.pool_msbs():
        pool = np.fromiter(index.pool_rows(msb), np.intp)
        rows += pool[index.state[pool] == UP].tolist()
    return rows
