"""Choosing what to preempt by quota: the fewest candidates, taken in their order, whose
release lets a job be admitted (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.model.quota_tree import QuotaTree, Vector


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

    def amount(self) -> Vector:
        return tuple(d * self.frees for d in self.demand)


def choose_victims(
    tree: QuotaTree,
    entitlement: str,
    demand: Vector,
    candidates: Sequence[Candidate],
    budget: int,
) -> list[Candidate]:
    """The victims that make `demand` fit `entitlement`: candidates are taken in order until it
    fits (skipping any that would exceed `budget` tasks), then every victim that is not needed
    after all is given back, the last taken first, so that no victim can be spared. Empty when
    no set of them makes room. The tree is left as it was."""
    taken: list[Candidate] = []
    spent = 0
    try:
        for candidate in candidates:
            if tree.fits(entitlement, demand):
                break
            if spent + candidate.frees > budget:
                continue
            tree.release(candidate.entitlement, candidate.amount())
            taken.append(candidate)
            spent += candidate.frees
        if not tree.fits(entitlement, demand):
            return []
        for candidate in reversed(list(taken)):
            tree.use(candidate.entitlement, candidate.amount())
            if tree.fits(entitlement, demand):
                taken.remove(candidate)
            else:
                tree.release(candidate.entitlement, candidate.amount())
        return taken
    finally:
        for candidate in taken:
            tree.use(candidate.entitlement, candidate.amount())
