"""Choosing what to preempt by quota (pure): which admitted jobs a head may preempt, in the
order they would go, and the fewest of them whose release lets it be admitted, beside those
the allocator chose for the machines."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from tether.model.admission import AdmissionState, PreemptionCause
from tether.model.quota_tree import QuotaTree, Vector, neg
from tether.scheduler.admission.queued import QueuedJob

FAIR_SHARE_TOLERANCE: Final = 0.01
"""A borrower preempts for fair share only if, admitted, it is still this far (relative)
below its fair share: without a margin every arrival and every ending job tips a level out of
balance by one job, and borrowers preempt each other all day. Measured with
scripts/sim_contention.py (8,457 jobs): no margin, 4,477 preemptions; 1%, about 2,100 and every
share within 2.4% of its weight on three seeds; 3%, 1,408 but one seed's share 6.1% off."""

FAIR_SHARE_COST_LIMIT: Final = 1.0
"""A preemption for fair share stops at most this much of its head's dominant resource per
unit the head is admitted with: shares level out as jobs end anyway, and emptying another
team's machine of eight one-GPU tasks to start one is work lost for little. Measured with
scripts/sim_contention.py (seed 1, victims chosen by machine): no limit, 4,746 tasks preempted
(the teams' shares within 2.0% of their weights); 1, 2,672 (3.4%, Jain 0.997)."""


CANDIDATE_LIMIT: Final = 256
"""Candidates a proposal offers the allocator, which picks among them machine by machine: the
search costs a pass over the machines they hold per machine cleared."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """Tasks of one job that may be preempted together."""

    job: str
    entitlement: str
    demand: Vector
    """Per task."""
    frees: int
    """Tasks whose resources preempting it frees."""
    take: int
    """Tasks it takes off the job's admission."""
    rank: tuple[object, ...]
    """Lower goes first."""
    cause: PreemptionCause = PreemptionCause.PRIORITY
    floor: tuple[str, float] | None = None
    """A fair-share victim's side (a subtree's root) and the dominant share it must keep."""

    def amount(self) -> Vector:
        return tuple(d * self.frees for d in self.demand)


@dataclass(frozen=True, slots=True)
class _Side:
    """A sibling subtree of the head's path whose jobs the head may preempt."""

    root: str
    """The subtree's root: a sibling of the head's ancestor (or of the head's entitlement)."""
    cause: PreemptionCause
    fair_share: float
    """The level's fair share: its active subtrees' weighted dominant shares, averaged by
    weight. A fair-share victim's side keeps at least this much."""


def candidates(
    tree: QuotaTree,
    head: QueuedJob,
    demand: Vector,
    admitted: Callable[[str], Iterable[QueuedJob]],
    *,
    reclaims: bool,
    non_preemptible_priority: int,
    now: datetime,
) -> list[Candidate]:
    """The tasks `head` may preempt for `demand`, in the order they would go: elastic tasks
    above their job's minimum first; then lower priority first, then the most recently admitted
    (least work lost). In its own entitlement only strictly lower priorities (an elastic job's
    extra tasks: of no higher priority, but only lower ones for an elastic job growing), and
    never the head's own tasks. Elsewhere only subtrees that borrow: any job of theirs when the
    head `reclaims` its guarantee; otherwise (the head would borrow too) jobs of no higher
    priority whose subtree stays above the head's weighted dominant share even without them
    (fair share). Never the protected band, never a job preempted too often, and
    `admitted(entitlement)` are the jobs to consider in each entitlement."""
    sides = _sides(tree, head.entitlement, demand, reclaims=reclaims)
    priority = head.admission.priority
    # Growing elastic jobs of one priority would take each other's extra tasks in turn, each
    # giving back what it took as the other grows: growth takes only what is lower.
    takes_equal_extras = not head.admission.growing
    found = []
    for entitlement in sorted({head.entitlement, *sides}):
        own = entitlement == head.entitlement
        side = sides.get(entitlement)
        fair_share = side is not None and side.cause is PreemptionCause.FAIR_SHARE
        for job in admitted(entitlement):
            record = job.admission
            # The cheap refusals first: a pass looks at every admitted job of these subtrees.
            if record.priority > priority and (own or fair_share):
                continue
            if job.handle == head.handle:
                continue  # what it holds is what it grows from
            if (
                own
                and record.priority == priority
                and (not takes_equal_extras or record.admitted <= record.least_tasks)
            ):
                continue  # neither lower nor elastic
            if record.state is not AdmissionState.ADMITTED or job.demand is None or job.closed:
                continue
            if record.priority >= non_preemptible_priority or _preempted_too_often(tree, job, now):
                continue
            held = min(job.holding, record.admitted)
            extra = max(held - record.least_tasks, 0)
            # Least work lost: the most recently admitted first.
            recency = -(record.admitted_at or now).timestamp()
            cause = PreemptionCause.PRIORITY if side is None else side.cause
            floor = (side.root, side.fair_share) if fair_share and side is not None else None
            if extra and (not own or record.priority <= priority):
                found.append(
                    Candidate(
                        job.handle,
                        job.entitlement,
                        job.demand,
                        frees=extra,
                        take=extra,
                        rank=(0, record.priority, recency, job.handle),
                        cause=cause,
                        floor=floor,
                    )
                )
            if own and record.priority >= priority:
                continue
            found.append(
                Candidate(
                    job.handle,
                    job.entitlement,
                    job.demand,
                    frees=held - extra,
                    take=record.admitted - extra,
                    rank=(1, record.priority, recency, job.handle),
                    cause=cause,
                    floor=floor,
                )
            )
    keeps_fair = _KeepsFair(tree)
    found = [c for c in found if c.frees and keeps_fair(c)]
    found.sort(key=lambda candidate: candidate.rank)
    return found


def _sides(tree: QuotaTree, name: str, demand: Vector, *, reclaims: bool) -> dict[str, _Side]:
    """Entitlement -> the sibling subtree of the head's path it belongs to, for every subtree
    whose jobs the head may preempt."""
    path = [node.name for node in tree.path(name)]
    sides: dict[str, _Side] = {}
    for mine, ancestor in itertools.pairwise(path):
        fair = _fair_share(tree, ancestor, mine)
        # Fair share preempts only for a side that stays within it once admitted, and only
        # from sides above it: a preemption never swaps who is above and who below, so
        # borrowers cannot take turns preempting each other.
        below = tree.dominant_share(mine, demand) <= fair * (1 - FAIR_SHARE_TOLERANCE)
        for child in tree.nodes[ancestor].children:
            if child == mine or not any(tree.borrowed(child)):
                continue
            if reclaims:
                cause = PreemptionCause.RECLAIM
            elif below and tree.dominant_share(child) > fair:
                cause = PreemptionCause.FAIR_SHARE
            else:
                continue
            side = _Side(child, cause, fair)
            sides.update((node.name, side) for node in tree.subtree(child))
    return sides


def _fair_share(tree: QuotaTree, parent: str, waiting: str) -> float:
    """The weighted dominant share every active child of `parent` would have were the
    children's use shared by weight; active: consuming, or the one with a job `waiting`."""
    active = [
        tree.nodes[child]
        for child in tree.nodes[parent].children
        if child == waiting or any(tree.nodes[child].consumption)
    ]
    weights = sum(node.entitlement.weight for node in active)
    used = sum(tree.dominant_share(node.name) * node.entitlement.weight for node in active)
    return used / weights if weights else 0.0


class _KeepsFair:
    """Whether a fair-share victim's side keeps its fair share without it, on the tree as it is
    (`forget` when it changes). A pass asks for hundreds of candidates of a few sides, most of
    them freeing one of a few amounts: each answer is worked out once."""

    def __init__(self, tree: QuotaTree) -> None:
        self._tree = tree
        self._known: dict[tuple[tuple[str, float], Vector, int], bool] = {}

    def __call__(self, candidate: Candidate) -> bool:
        if candidate.floor is None:
            return True
        key = (candidate.floor, candidate.demand, candidate.frees)
        known = self._known.get(key)
        if known is None:
            root, fair_share = candidate.floor
            share = self._tree.dominant_share(root, neg(candidate.amount()))
            known = self._known[key] = share >= fair_share
        return known

    def forget(self) -> None:
        self._known.clear()


def _preempted_too_often(tree: QuotaTree, job: QueuedJob, now: datetime) -> bool:
    if not job.admission.preempted_at:
        return False
    limit = tree.nodes[job.entitlement].entitlement.preemption.max_per_job_per_hour
    hour = timedelta(hours=1)
    return sum(1 for at in job.admission.preempted_at if now - at < hour) >= limit


def choose_victims(
    tree: QuotaTree,
    entitlement: str,
    demand: Vector,
    candidates: Sequence[Candidate],
    budget: int,
    pinned: Sequence[Candidate] = (),
) -> list[Candidate]:
    """The victims that make `demand` fit `entitlement`: the `pinned` (the machines need them),
    then candidates taken in order until it fits (skipping any that would exceed `budget` tasks
    in all), then every victim not pinned that is not needed after all is given back, the last
    taken first, so that no victim can be spared. Empty when no set of them makes room. The
    tree is left as it was."""
    taken: list[Candidate] = []
    spent = 0
    try:
        for candidate in [*pinned, *(c for c in candidates if c not in pinned)]:
            if candidate not in pinned and tree.fits(entitlement, demand):
                break
            if spent + candidate.frees > budget:
                if candidate in pinned:
                    return []
                continue
            tree.release(candidate.entitlement, candidate.amount())
            taken.append(candidate)
            spent += candidate.frees
        if not tree.fits(entitlement, demand):
            return []
        for candidate in reversed(list(taken)):
            if candidate in pinned:
                break
            tree.use(candidate.entitlement, candidate.amount())
            if tree.fits(entitlement, demand):
                taken.remove(candidate)
            else:
                tree.release(candidate.entitlement, candidate.amount())
        return taken
    finally:
        for candidate in taken:
            tree.use(candidate.entitlement, candidate.amount())


def fair_share_cost(
    tree: QuotaTree, entitlement: str, demand: Vector, victims: Sequence[Candidate]
) -> float:
    """What the fair-share victims free of the head's dominant resource (its largest fraction
    of the tree's quota), per unit of it in `demand`."""
    root = tree.nodes[tree.root_of(entitlement)].quota
    dominant = max(range(len(demand)), key=lambda d: demand[d] / root[d] if root[d] else 0.0)
    freed = sum(
        victim.demand[dominant] * victim.frees
        for victim in victims
        if victim.cause is PreemptionCause.FAIR_SHARE
    )
    return freed / demand[dominant] if demand[dominant] else 0.0


def below_fair_share(tree: QuotaTree, victims: Sequence[Candidate]) -> str | None:
    """The first side the victims together take below its fair share (each alone keeps it:
    `candidates` sees to that), or None. The tree is left as it was."""
    for victim in victims:
        tree.release(victim.entitlement, victim.amount())
    try:
        for victim in victims:
            if victim.floor is not None:
                root, fair_share = victim.floor
                if tree.dominant_share(root) < fair_share:
                    return root
        return None
    finally:
        for victim in victims:
            tree.use(victim.entitlement, victim.amount())
