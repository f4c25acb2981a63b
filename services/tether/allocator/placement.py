"""Choosing machines for tasks: hard rules filter the candidates, soft rules rank them (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tether.allocator.index import Candidate
from tether.model import (
    AttributePredicate,
    ConstraintOp,
    Entitlement,
    Job,
    Machine,
    MachineState,
    Resources,
)
from tether.model.resources import quantity_text


@dataclass(frozen=True, slots=True)
class Rule:
    """A hard placement rule: which candidates it accepts, and how to explain its rejections."""

    name: str
    """For Explain, e.g. "resources.memory" or "constraint zone in [a, b]"."""
    reason: str
    """Why a rejected machine does not fit, for people, e.g. "insufficient memory"."""
    accepts: Callable[[Candidate], bool]
    describe: Callable[[Sequence[Candidate], Sequence[Candidate]], str]
    """(machines the rule examined, machines it rejected) -> detail, e.g. the closest miss."""


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """What one rule did: how many machines it rejected that earlier rules let through."""

    rule: str
    reason: str
    rejected: int
    detail: str


@dataclass(frozen=True, slots=True)
class Filtered:
    """The machines every rule accepted, and what each rule rejected."""

    survivors: list[Candidate]
    outcomes: list[RuleOutcome]
    considered: int


@dataclass(frozen=True, slots=True)
class Choice:
    """Machines chosen for tasks (in the order chosen), and why the others have none."""

    placements: dict[int, str]
    unplaced: dict[int, str]


@dataclass(frozen=True, slots=True)
class Explanation:
    """Explain's answer for one task of a job: every rule's effect and a one-line summary."""

    considered: int
    outcomes: list[RuleOutcome]
    summary: str


def _no_detail(examined: Sequence[Candidate], rejected: Sequence[Candidate]) -> str:
    return ""


def _listed(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


# --- attribute predicates --------------------------------------------------------------------


def predicate_text(predicate: AttributePredicate) -> str:
    """The predicate as people write it, e.g. "zone in [a, b]"."""
    if predicate.op is ConstraintOp.EXISTS:
        return f"{predicate.attribute} exists"
    if predicate.op in (ConstraintOp.IN, ConstraintOp.NOT_IN):
        return f"{predicate.attribute} {predicate.op.value} [{', '.join(predicate.values)}]"
    return f"{predicate.attribute} {predicate.op.value} {predicate.value}"


def matches(predicate: AttributePredicate, attributes: Mapping[str, str]) -> bool:
    """Whether machine `attributes` satisfy `predicate`.

    A missing attribute fails every operator except `!=` and `not_in`, which it satisfies (it
    is not the excluded value); `>=` and `<=` fail for an attribute that is not a number.
    """
    actual = attributes.get(predicate.attribute)
    match predicate.op:
        case ConstraintOp.EXISTS:
            return actual is not None
        case ConstraintOp.EQ:
            return actual == predicate.value
        case ConstraintOp.NE:
            return actual != predicate.value
        case ConstraintOp.IN:
            return actual in predicate.values
        case ConstraintOp.NOT_IN:
            return actual not in predicate.values
        case ConstraintOp.GE | ConstraintOp.LE:
            number = _number(actual)
            # The model guarantees a numeric operand for these operators.
            bound = float(predicate.value or "nan")
            if number is None:
                return False
            return number >= bound if predicate.op is ConstraintOp.GE else number <= bound


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def preference_weight(job: Job, machine: Machine) -> int:
    """The total weight of the job's preferences that `machine` satisfies."""
    return sum(
        preference.weight
        for preference in job.spec.placement.preferences
        if matches(preference, machine.attributes)
    )


# --- hard rules ------------------------------------------------------------------------------


def machine_rules(job: Job, entitlement: Entitlement) -> list[Rule]:
    """The rules about the machine itself, in the order they apply: they hold for every task."""
    placement = job.spec.placement
    rules = [
        Rule(
            "state up",
            "not up",
            lambda c: c.machine.state is MachineState.UP,
            lambda _, rejected: ", ".join(
                f"{count} {state.value}"
                for state, count in sorted(Counter(c.machine.state for c in rejected).items())
            ),
        ),
        Rule(
            f"entitlement free pool or {entitlement.name}",
            "assigned to another entitlement",
            lambda c: c.machine.entitlement in (None, entitlement.name),
            lambda _, rejected: (
                "assigned to " + _listed({c.machine.entitlement or "" for c in rejected})
            ),
        ),
    ]
    allowed_by = [
        (f"entitlement {entitlement.name}", entitlement.allowed_dcs),
        (f"job {job.handle}", placement.datacenters),
    ]
    limits = [(who, dcs) for who, dcs in allowed_by if dcs]
    if limits:
        rules.append(
            Rule(
                "datacenter",
                "datacenter not allowed",
                lambda c: all(c.machine.topology.dc in dcs for _, dcs in limits),
                lambda *_: "; ".join(f"{who} allows {_listed(dcs)}" for who, dcs in limits),
            )
        )
    if placement.hardware_types:
        hardware_types = placement.hardware_types
        rules.append(
            Rule(
                "hardware type",
                "hardware type not allowed",
                lambda c: c.machine.hardware_type in hardware_types,
                lambda *_: f"allowed: {_listed(hardware_types)}",
            )
        )
    rules.extend(_constraint_rule(constraint) for constraint in placement.constraints)
    return rules


def _constraint_rule(constraint: AttributePredicate) -> Rule:
    text = predicate_text(constraint)
    return Rule(
        f"constraint {text}",
        f"fails constraint {text}",
        lambda c: matches(constraint, c.machine.attributes),
        _no_detail,
    )


def resource_rules(need: Resources) -> list[Rule]:
    """One rule per dimension the task needs: the machine's free amount must cover it."""
    return [_resource_rule(label, amount) for label, amount in need.amounts().items() if amount]


def _resource_rule(label: str, need: int) -> Rule:
    def free(candidate: Candidate) -> int:
        return candidate.free.amounts().get(label, 0)

    def closest_miss(examined: Sequence[Candidate], rejected: Sequence[Candidate]) -> str:
        best = max((free(c) for c in examined), default=0)
        return f"need {quantity_text(label, need)}, best has {quantity_text(label, best)} free"

    return Rule(
        f"resources.{label}", f"insufficient {label}", lambda c: free(c) >= need, closest_miss
    )


def quota_shortfall(entitlement: Entitlement, usage: Resources, need: Resources) -> str | None:
    """Why `need` more does not fit in the entitlement's quota on top of `usage`, or None."""
    quota, used = entitlement.quota.resources.amounts(), usage.amounts()
    over = [
        f"{label}: {quantity_text(label, amount)} more, {quantity_text(label, used.get(label, 0))}"
        f" of {quantity_text(label, quota.get(label, 0))} in use"
        for label, amount in need.amounts().items()
        if amount and used.get(label, 0) + amount > quota.get(label, 0)
    ]
    if not over:
        return None
    return f"entitlement {entitlement.name} quota exceeded: {'; '.join(over)}"


def apply_rules(candidates: Sequence[Candidate], rules: Sequence[Rule]) -> Filtered:
    """Applies `rules` in order; each one sees only the machines every earlier rule accepted."""
    survivors = list(candidates)
    outcomes: list[RuleOutcome] = []
    for rule in rules:
        kept: list[Candidate] = []
        rejected: list[Candidate] = []
        for candidate in survivors:
            (kept if rule.accepts(candidate) else rejected).append(candidate)
        detail = rule.describe(survivors, rejected) if rejected else ""
        outcomes.append(RuleOutcome(rule.name, rule.reason, len(rejected), detail))
        survivors = kept
    return Filtered(survivors, outcomes, len(candidates))


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


# --- choosing --------------------------------------------------------------------------------


def choose(
    candidates: Sequence[Candidate],
    job: Job,
    entitlement: Entitlement,
    usage: Resources,
    indexes: Sequence[int],
    placed: Mapping[int, str],
) -> Choice:
    """Picks a machine for each task of `indexes` in turn, as if the earlier ones were placed.

    `placed` is where the job's other tasks are (for the spread), `usage` what the entitlement
    holds now. Ranking: fewest of the job's tasks in the machine's spread domain, then the most
    preference weight, then the least free memory and CPU (best fit), then the machine id.
    """
    need = job.spec.task.resources
    level = job.spec.placement.spread.level
    by_id = {candidate.id: candidate for candidate in candidates}
    spread = Counter(
        level.of(by_id[machine_id].machine.topology)
        for machine_id in placed.values()
        if machine_id in by_id
    )
    eligible = apply_rules(candidates, machine_rules(job, entitlement))
    free = {c.id: c.free for c in eligible.survivors}
    weight = {c.id: preference_weight(job, c.machine) for c in eligible.survivors}

    def rank(c: Candidate) -> tuple[int, int, int, int, str]:
        # The task's own size is the same for every machine, so ordering by free space before
        # placing it orders by free space after it too.
        left = free[c.id]
        return (
            spread[level.of(c.machine.topology)],
            -weight[c.id],
            left.memory_mib,
            left.cpu,
            c.id,
        )

    # Placing a task shrinks only the chosen machine's free space: the others keep fitting.
    fitting = {c.id: c for c in eligible.survivors if need.fits_in(free[c.id])}
    placements: dict[int, str] = {}
    for position, index in enumerate(indexes):
        reason = quota_shortfall(entitlement, usage, need)
        if reason is None:
            if fitting:
                best = min(fitting.values(), key=rank)
                placements[index] = best.id
                free[best.id] = free[best.id] - need
                if not need.fits_in(free[best.id]):
                    del fitting[best.id]
                spread[level.of(best.machine.topology)] += 1
                usage = usage + need
                continue
            reason = "no machine fits: " + _no_fit(eligible, free, need)
        # The tasks are identical and space only shrinks: none of the rest fits either.
        return Choice(placements, dict.fromkeys(indexes[position:], reason))
    return Choice(placements, {})


def _no_fit(eligible: Filtered, free: Mapping[str, Resources], need: Resources) -> str:
    now = [Candidate(c.id, c.machine, free[c.id]) for c in eligible.survivors]
    resources = apply_rules(now, resource_rules(need))
    return rejections([*eligible.outcomes, *resources.outcomes], eligible.considered, details=True)


def explain(
    candidates: Sequence[Candidate], job: Job, entitlement: Entitlement, usage: Resources
) -> Explanation:
    """Applies every rule for one more task of `job` and says what each one rejected."""
    need = job.spec.task.resources
    shortfall = quota_shortfall(entitlement, usage, need)
    quota = Rule(
        "quota",
        "entitlement quota exceeded",
        lambda _: shortfall is None,
        lambda *_: shortfall or "",
    )
    rules = [*machine_rules(job, entitlement), *resource_rules(need), quota]
    filtered = apply_rules(candidates, rules)
    fitting = len(filtered.survivors)
    rejected = rejections(filtered.outcomes, filtered.considered, details=False)
    if fitting:
        summary = f"{fitting} of {filtered.considered} machines fit"
        summary += f"; {rejected}" if rejected else ""
    else:
        summary = rejected
    return Explanation(filtered.considered, filtered.outcomes, summary)
