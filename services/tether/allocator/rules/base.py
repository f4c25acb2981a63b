"""What a placement rule is: a filter rules machines out and says why, a scorer ranks the
machines left; each declares what it reads of the job, the entitlement and the machine, and
the allocation cache's keys are derived from those declarations."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from tether.allocator.ephemeral import EphemeralNeed
from tether.allocator.index import AllocationIndex
from tether.allocator.rules.checks import I64, Check, Rows
from tether.model import Entitlement, Job

FreeOf = Callable[[Rows], npt.NDArray[np.int64]]
"""Rows -> their free resources (one row of the resource columns each)."""


class Fact(enum.Enum):
    """Something a rule reads of a machine.

    Record facts change only when the machine's record (`machines/<id>`) does, and the index
    tells the allocation cache when that happens: a filter that reads nothing else is applied
    once per job signature and cached. Allocation facts change with every placement: filters
    that read them are applied to the candidates of every plan.
    """

    STATE = "state"
    TOPOLOGY = "topology"
    HARDWARE = "hardware"
    PROFILE = "host profile"
    ATTRIBUTES = "attributes"
    CAPACITY = "capacity"
    HARVEST = "harvest"
    """Whether it is a harvest machine, and one its host takes back soon."""
    OWNER = "owner"
    """The entitlement holding the machine (allocation record)."""
    RECORD = "record"
    """Whether the allocation record and its entries can be read."""
    USAGE = "usage"
    """Resources the machine's tasks hold."""
    PLACEMENTS = "placements"
    """Where other jobs' tasks are."""


RECORD_FACTS = frozenset(
    {
        Fact.STATE,
        Fact.TOPOLOGY,
        Fact.HARDWARE,
        Fact.PROFILE,
        Fact.ATTRIBUTES,
        Fact.CAPACITY,
        Fact.HARVEST,
    }
)


@dataclass(frozen=True, slots=True)
class Reads:
    """What a rule's answer depends on: fields of the job's spec and of its entitlement (dotted
    attribute paths, e.g. "placement.constraints"), and facts of the machine."""

    job: tuple[str, ...] = ()
    entitlement: tuple[str, ...] = ()
    machine: frozenset[Fact] = frozenset()

    @property
    def cacheable(self) -> bool:
        """Whether the answer for a machine holds until its record changes."""
        return self.machine <= RECORD_FACTS

    @property
    def shared(self) -> bool:
        """Whether jobs of every entitlement alike in the job fields get the same answer."""
        return not self.entitlement


@dataclass(frozen=True, slots=True)
class Plan:
    """What rules see of one placement: the index as it is, the job, its entitlement (and its
    code), one task's resources, the entitlement's quota, and the machines' free resources as the
    plan leaves them."""

    index: AllocationIndex
    job: Job
    entitlement: Entitlement
    owner: int
    need: I64
    """One task's resources, a column per dimension machines offer."""
    quota: I64
    """The entitlement's resource quota, a column per dimension like `need`."""
    ephemeral: EphemeralNeed
    """One task's ephemeral resources: `free` has a column for each after `need`'s."""
    free: FreeOf


class Filter:
    """A hard rule: machines it rejects never take a task of the job."""

    reads: ClassVar[Reads]
    met_by_candidates: ClassVar[bool] = False
    """Whether every machine the planner considers meets the rule by how it is drawn (the
    entitlement's own machines and the free pool's): its checks then serve Explain only."""

    def checks(self, plan: Plan) -> list[Check]:
        """The rule's masks for this plan, in the order Explain reports them (none: the rule
        does not apply to the job)."""
        raise NotImplementedError

    def room(self, plan: Plan) -> Callable[[Rows, I64], I64] | None:
        """For a rule about capacity: per row, how many tasks of the job fit, given the rows
        and their free resources as the plan leaves them (None: the rule accepts or rejects a
        machine, it does not count). Its mask is then room > 0."""
        return None

    def prune_msbs(self, plan: Plan, msbs: list[int]) -> list[int]:
        """The MSBs (codes) whose machines the rule may accept: a rule about a whole group of
        machines (a datacenter, an MSB, a hardware type) drops the groups it rules out before
        any machine of them is read."""
        return msbs


class Scorer:
    """A soft rule: one or more bits of a machine's score; a higher score ranks first, and a
    scorer's bits outweigh every later scorer's (`registry.SCORERS` is in that order)."""

    reads: ClassVar[Reads]
    pool_only: ClassVar[bool] = False
    """Whether it ranks only free-pool machines (its bits are 0 for the entitlement's own)."""

    def parts(self, plan: Plan) -> list[tuple[str, int]]:
        """One (label, weight for Explain) per bit, the highest bit first."""
        raise NotImplementedError

    def bits(self, plan: Plan) -> int:
        """How many bits the scorer has for this plan (every plan asks; only Explain needs the
        labels, which a scorer may spare itself writing here)."""
        return len(self.parts(plan))

    def score(self, plan: Plan, rows: Rows) -> I64:
        """Per row, the scorer's bits (below 1 << len(parts))."""
        raise NotImplementedError

    def ranks(self, plan: Plan) -> bool:
        """Whether it can tell machines apart for this plan."""
        return self.bits(plan) > 0
