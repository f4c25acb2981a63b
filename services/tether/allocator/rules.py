"""Placement rules over index columns: hard rules as row masks, preferences as ranked bits."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tether.allocator.index import ABSENT, NONE, STATE_CODES, UP, AllocationIndex
from tether.model import Affinity, AttributePredicate, ConstraintOp, Entitlement, Job
from tether.model.resources import quantity_text

Rows = npt.NDArray[np.intp]
Mask = npt.NDArray[np.bool_]

DATACENTER_RULE = "datacenter"

_STATE_NAMES = {code: state.value for state, code in STATE_CODES.items()} | {ABSENT: "deleted"}


@dataclass(frozen=True, slots=True)
class Rule:
    """A hard placement rule: which rows it accepts, and how to explain its rejections."""

    name: str
    """For Explain, e.g. "resources.memory" or "constraint zone in [a, b]"."""
    reason: str
    """Why a rejected machine does not fit, for people, e.g. "insufficient memory"."""
    accepts: Callable[[Rows], Mask]
    describe: Callable[[Rows, Rows], str] = lambda examined, rejected: ""
    """(rows the rule examined, rows it rejected) -> detail, e.g. the closest miss."""


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """What one rule did: how many machines it rejected that earlier rules let through."""

    rule: str
    reason: str
    rejected: int
    detail: str


@dataclass(frozen=True, slots=True)
class Filtered:
    """The rows every rule accepted, and what each rule rejected."""

    survivors: Rows
    outcomes: list[RuleOutcome]
    considered: int


def listed(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def predicate_text(predicate: AttributePredicate) -> str:
    """The predicate as people write it, e.g. "zone in [a, b]"."""
    if predicate.op is ConstraintOp.EXISTS:
        return f"{predicate.attribute} exists"
    if predicate.op in (ConstraintOp.IN, ConstraintOp.NOT_IN):
        return f"{predicate.attribute} {predicate.op.value} [{', '.join(predicate.values)}]"
    return f"{predicate.attribute} {predicate.op.value} {predicate.value}"


def matches(index: AllocationIndex, predicate: AttributePredicate, rows: Rows) -> Mask:
    """Which rows satisfy `predicate`.

    A missing attribute fails every operator except `!=` and `not_in`, which it satisfies (it
    is not the excluded value); `>=` and `<=` fail for an attribute that is not a number.
    """
    op = predicate.op
    if op in (ConstraintOp.GE, ConstraintOp.LE):
        numbers = index.numbers(predicate.attribute)[rows]
        # The model guarantees a numeric operand for these operators.
        bound = float(predicate.value or "nan")
        with np.errstate(invalid="ignore"):
            return numbers >= bound if op is ConstraintOp.GE else numbers <= bound
    codes = index.attributes.get(predicate.attribute)
    if codes is None:
        return np.full(len(rows), op in (ConstraintOp.NE, ConstraintOp.NOT_IN))
    values = index.attribute_values[predicate.attribute]
    column = codes[rows]
    present: Mask = column != NONE
    match op:
        case ConstraintOp.EXISTS:
            return present
        case ConstraintOp.EQ | ConstraintOp.NE:
            equal: Mask = (column == values.find(predicate.value)) & present
            return equal if op is ConstraintOp.EQ else ~equal
        case _:
            wanted = [code for code in map(values.find, predicate.values) if code != NONE]
            inside = np.isin(column, wanted)
            return inside if op is ConstraintOp.IN else ~inside


def allowed_datacenters(job: Job, entitlement: Entitlement) -> set[str] | None:
    """The datacenters both the entitlement and the job allow (None: any)."""
    limits = [set(dcs) for dcs in (entitlement.allowed_dcs, job.spec.placement.datacenters) if dcs]
    return set.intersection(*limits) if limits else None


def machine_rules(index: AllocationIndex, job: Job, entitlement: Entitlement) -> list[Rule]:
    """The rules about the machine alone, in the order they apply; they hold for every task and
    change only when a machine record does, so their result can be cached."""
    placement = job.spec.placement
    rules = [
        Rule(
            "state up",
            "not up",
            lambda rows: index.state[rows] == UP,
            lambda _, rejected: ", ".join(
                f"{count} {_STATE_NAMES[int(state)]}"
                for state, count in sorted(Counter(index.state[rejected].tolist()).items())
            ),
        ),
    ]
    allowed_by = [
        (f"entitlement {entitlement.name}", entitlement.allowed_dcs),
        (f"job {job.handle}", placement.datacenters),
    ]
    limits = [(who, dcs) for who, dcs in allowed_by if dcs]
    allowed = allowed_datacenters(job, entitlement)
    if allowed is not None:
        # code(), not find(): a datacenter seen later must get the code the rule holds.
        codes = [index.dcs.code(dc) for dc in allowed]
        rules.append(
            Rule(
                DATACENTER_RULE,
                "datacenter not allowed",
                lambda rows: np.isin(index.dc[rows], codes),
                lambda *_: "; ".join(f"{who} allows {listed(dcs)}" for who, dcs in limits),
            )
        )
    if placement.hardware_types:
        hardware_types = placement.hardware_types
        hardware = [index.hardware.code(name) for name in hardware_types]
        rules.append(
            Rule(
                "hardware type",
                "hardware type not allowed",
                lambda rows: np.isin(index.hw[rows], hardware),
                lambda *_: f"allowed: {listed(hardware_types)}",
            )
        )
    for constraint in placement.constraints:
        text = predicate_text(constraint)
        rules.append(
            Rule(
                f"constraint {text}",
                f"fails constraint {text}",
                lambda rows, constraint=constraint: matches(index, constraint, rows),  # type: ignore[misc]
            )
        )
    return rules


def ownership_rule(index: AllocationIndex, entitlement: Entitlement) -> Rule:
    """The machine is in the free pool or already in the job's entitlement."""
    owner = index.owners.find(entitlement.name)
    return Rule(
        f"entitlement free pool or {entitlement.name}",
        "assigned to another entitlement",
        lambda rows: (index.owner[rows] == NONE) | (index.owner[rows] == owner),
        lambda _, rejected: (
            "assigned to "
            + listed({index.owners.name(int(code)) or "" for code in set(index.owner[rejected])})
        ),
    )


def affinity_rule(index: AllocationIndex, affinity: Affinity) -> Rule:
    """Co-location with (or, anti, away from) another job's tasks, by machine or by rack."""
    where = affinity.level

    def accepts(rows: Rows) -> Mask:
        other = np.fromiter(index.held(affinity.job).values(), np.intp)
        if where == "rack":
            inside = np.isin(index.rack[rows], index.rack[other])
        else:
            inside = np.isin(rows, other)
        return ~inside if affinity.anti else inside

    if affinity.anti:
        return Rule(
            f"anti-affinity {affinity.job} ({where})", f"{where} holds tasks of {affinity.job}",
            accepts,
        )  # fmt: skip
    return Rule(
        f"affinity {affinity.job} ({where})", f"{where} holds no task of {affinity.job}", accepts
    )


def readable_rule(index: AllocationIndex) -> Rule:
    return Rule(
        "allocation record readable",
        "unreadable allocation record",
        lambda rows: index.readable[rows],
    )


FreeOf = Callable[[Rows], npt.NDArray[np.int64]]
"""Rows -> their free resources (one row of the resource columns each)."""


def resource_rules(
    index: AllocationIndex, need: npt.NDArray[np.int64], free: FreeOf | None = None
) -> list[Rule]:
    """One rule per dimension the task needs: the machine's free amount must cover it.

    `free` gives the free resources to judge by (placement passes its tentative view); by
    default what the index holds.
    """
    free_of: FreeOf = free or (lambda rows: index.capacity[rows] - index.used[rows])
    return [
        _resource_rule(index.dimensions[column], column, int(amount), free_of)
        for column, amount in enumerate(need)
        if amount
    ]


def _resource_rule(label: str, column: int, need: int, free_of: FreeOf) -> Rule:
    def free(rows: Rows) -> npt.NDArray[np.int64]:
        return free_of(rows)[:, column]

    def closest_miss(examined: Rows, rejected: Rows) -> str:
        best = int(free(rejected).max()) if len(rejected) else 0
        return f"need {quantity_text(label, need)}, best has {quantity_text(label, best)} free"

    return Rule(
        f"resources.{label}", f"insufficient {label}", lambda rows: free(rows) >= need, closest_miss
    )


def apply_rules(rows: Rows, rules: Sequence[Rule]) -> Filtered:
    """Applies `rules` in order; each one sees only the rows every earlier rule accepted."""
    survivors = rows
    outcomes: list[RuleOutcome] = []
    for rule in rules:
        accepted = rule.accepts(survivors) if len(survivors) else np.zeros(0, np.bool_)
        rejected = survivors[~accepted]
        detail = rule.describe(survivors, rejected) if len(rejected) else ""
        outcomes.append(RuleOutcome(rule.name, rule.reason, len(rejected), detail))
        survivors = survivors[accepted]
    return Filtered(survivors, outcomes, len(rows))


def accepted_by_all(rules: Sequence[Rule], rows: Rows) -> Mask:
    """Per row, whether every rule accepts it (no accounting)."""
    mask = np.ones(len(rows), np.bool_)
    for rule in rules:
        mask &= rule.accepts(rows)
    return mask


def passes(rules: Sequence[Rule], rows: Rows) -> Rows:
    """The rows every rule accepts (no accounting)."""
    for rule in rules:
        if not len(rows):
            break
        rows = rows[rule.accepts(rows)]
    return rows


def rejections(outcomes: Sequence[RuleOutcome], considered: int, *, details: bool) -> str:
    """E.g. "3 of 4 machines: insufficient memory (need ...); 1 of 4: not up", largest first."""
    if not considered:
        return "the region has no machines"
    parts: list[str] = []
    for outcome in sorted((o for o in outcomes if o.rejected), key=lambda o: -o.rejected):
        machines = " machines" if not parts else ""
        detail = f" ({outcome.detail})" if details and outcome.detail else ""
        parts.append(f"{outcome.rejected} of {considered}{machines}: {outcome.reason}{detail}")
    return "; ".join(parts)


# --- preferences ------------------------------------------------------------------------------


def preference_scores(index: AllocationIndex, job: Job, rows: Rows) -> npt.NDArray[np.int64]:
    """Per row, one bit per satisfied preference, the first rule the highest bit: comparing
    scores compares rule by rule, so a rule outweighs every later rule together."""
    preferences = job.spec.placement.preferences
    scores = np.zeros(len(rows), np.int64)
    for position, preference in enumerate(preferences):
        bit = np.int64(1) << np.int64(len(preferences) - 1 - position)
        scores |= np.where(matches(index, preference, rows), bit, np.int64(0))
    return scores


def effective_weights(job: Job) -> list[int]:
    """Each preference's weight scaled to exceed every later rule's together (for Explain)."""
    weights: list[int] = []
    below = 0
    for preference in reversed(job.spec.placement.preferences):
        weight = preference.weight * (below + 1)
        weights.append(weight)
        below += weight
    return weights[::-1]


def quota_text(
    index: AllocationIndex, entitlement: Entitlement, need: npt.NDArray[np.int64], chosen: int
) -> str | None:
    """Why one more task of `need` does not fit the entitlement's resource quota on top of its
    usage and `chosen` tasks of the request already planned, or None."""
    quota = index.vector(entitlement.quota.resources)
    usage = index.usage_of(entitlement.name) + need * chosen
    over = [
        f"{label}: {quantity_text(label, int(need[column]))} more, "
        f"{quantity_text(label, int(usage[column]))} of "
        f"{quantity_text(label, int(quota[column]))} in use"
        for column, label in enumerate(index.dimensions)
        if need[column] and usage[column] + need[column] > quota[column]
    ]
    if not over:
        return None
    return f"entitlement {entitlement.name} quota exceeded: {'; '.join(over)}"


def quota_room(
    index: AllocationIndex, entitlement: Entitlement, need: npt.NDArray[np.int64]
) -> int:
    """How many more tasks of `need` the entitlement's resource quota allows."""
    quota = index.vector(entitlement.quota.resources)
    usage = index.usage_of(entitlement.name)
    wanted = need > 0
    if not wanted.any():
        return 1 << 40
    left = np.maximum(quota[wanted] - usage[wanted], 0)
    return int((left // need[wanted]).min())


def slots(free: npt.NDArray[np.int64], need: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Per row of `free`, how many tasks of `need` fit."""
    wanted = need > 0
    if not wanted.any():
        return np.full(len(free), 1 << 20, np.int64)
    fitting: npt.NDArray[np.int64] = (np.maximum(free[:, wanted], 0) // need[wanted]).min(axis=1)
    return fitting
