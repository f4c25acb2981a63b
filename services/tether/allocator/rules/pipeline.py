"""The registered rules bound to one plan: which checks are cached and which run per plan, a
machine's score, the order machines are taken in, and the cache keys, all from the one list."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pydantic_core

from tether.allocator.index import BASE_DIMENSIONS
from tether.allocator.rules import registry
from tether.allocator.rules.base import Filter, Plan, Reads, Scorer
from tether.allocator.rules.checks import (
    I64,
    UNLIMITED_ROOM,
    Check,
    Mask,
    Rows,
    accepted_by_all,
)

Signature = tuple[object, ...]
"""What a cached answer depends on; equal for jobs alike in it."""

_CPU = BASE_DIMENSIONS.index("cpu")
_MEMORY = BASE_DIMENSIONS.index("memory")


def best_first(
    rows: Rows,
    scores: I64,
    free: I64,
    *,
    first: Sequence[npt.NDArray[np.generic]] = (),
    ties: Sequence[npt.NDArray[np.generic]] = (),
) -> npt.NDArray[np.intp]:
    """The order machines are taken in: grouped by `first` (the first array outermost), then
    the highest score, then the tightest fit (least free memory, then CPU: the roomy machines
    stay free for big tasks), then by `ties`, then by row."""
    keys = (rows, *reversed(ties), free[:, _CPU], free[:, _MEMORY], -scores, *reversed(first))
    return np.lexsort(keys)


Field = tuple[bool, tuple[str, ...]]
"""A field a rule reads: (of the job's spec, else of the entitlement; its attribute path)."""


@dataclass(frozen=True, slots=True)
class _Layout:
    """What the registered rules imply for every plan alike, worked out once per registry."""

    per_plan: tuple[Filter, ...]
    """Filters that read allocation facts, run on every plan's candidates (those the candidates
    meet by how they are drawn aside; a plan also sets aside the ones that count room)."""
    cached: tuple[Filter, ...]
    """Filters that read only a machine's record: their answer is cached."""
    shared: tuple[Filter, ...]
    """Cached filters alike for every entitlement: free-pool lists are built with these."""
    unshared: tuple[Filter, ...]
    """The other cached filters: what a machine of a free-pool list still has to pass."""
    owned_fields: tuple[Field, ...]
    pool_fields: tuple[Field, ...]
    reason_fields: tuple[Field, ...]


@functools.lru_cache(maxsize=8)
def _layout(filters: tuple[Filter, ...], scorers: tuple[Scorer, ...], spread: Reads) -> _Layout:
    cached = tuple(rule for rule in filters if rule.reads.cacheable)
    shared = tuple(rule for rule in cached if rule.reads.shared)
    return _Layout(
        per_plan=tuple(
            rule for rule in filters if not rule.reads.cacheable and not rule.met_by_candidates
        ),
        cached=cached,
        shared=shared,
        unshared=tuple(rule for rule in cached if rule not in shared),
        owned_fields=_fields(rule.reads for rule in cached),
        pool_fields=_fields([*(rule.reads for rule in shared), *(s.reads for s in scorers)]),
        reason_fields=_fields([*(rule.reads for rule in filters), spread]),
    )


def _fields(reads: Iterable[Reads]) -> tuple[Field, ...]:
    fields: list[Field] = []
    for read in reads:
        fields += [(True, tuple(path.split("."))) for path in read.job]
        fields += [(False, tuple(path.split("."))) for path in read.entitlement]
    return tuple(fields)


class Pipeline:
    """Every registered filter and scorer bound to `plan`."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        # Read at each plan, not at import: a test registers a rule by replacing the tuple.
        self.filters = registry.FILTERS
        self.scorers = registry.SCORERS
        self._layout = _layout(self.filters, self.scorers, registry.SPREAD.reads)
        # A plan binds only the checks it runs every time: the cached ones are needed when the
        # cache misses, and all of them only for Explain (binding them all cost a tenth of a
        # plan).
        rooms = [(rule, rule.room(plan)) for rule in self.filters]
        self._rooms = [room for _, room in rooms if room is not None]
        """Per capacity rule, how many tasks each row takes (its checks are for Explain)."""
        capacity = {rule for rule, room in rooms if room is not None}
        self._per_plan: list[Check] = self._checks_of(
            rule for rule in self._layout.per_plan if rule not in capacity
        )
        """Checks of rules that read allocation facts, run on every plan's candidates."""
        self._bits = [(scorer, scorer.bits(plan)) for scorer in self.scorers]

    @functools.cached_property
    def checks(self) -> list[Check]:
        """Every check, in the order the rules apply (what Explain reports)."""
        return self._checks_of(self.filters)

    @functools.cached_property
    def cached(self) -> list[Check]:
        """Checks of rules that read only a machine's record: their answer is cached."""
        return self._checks_of(self._layout.cached)

    @functools.cached_property
    def shared(self) -> list[Check]:
        """Cached checks alike for every entitlement: free-pool lists are built with these."""
        return self._checks_of(self._layout.shared)

    @functools.cached_property
    def unshared(self) -> list[Check]:
        """The other cached checks, which a machine of a free-pool list still has to pass."""
        return self._checks_of(self._layout.unshared)

    def _checks_of(self, rules: Iterable[Filter]) -> list[Check]:
        return [check for rule in rules for check in rule.checks(self.plan)]

    # --- feasibility -------------------------------------------------------------------------

    def masks(self, rows: Rows) -> Mask:
        """The per-plan rules that accept or reject (not those that count room)."""
        return accepted_by_all(self._per_plan, rows)

    def room(self, rows: Rows, free: I64 | None = None) -> I64:
        """Per row, how many tasks of the job the capacity rules let it take (`free`: the rows'
        free resources as the plan leaves them, when the caller has them already)."""
        if not self._rooms:
            return np.full(len(rows), UNLIMITED_ROOM, np.int64)
        if free is None:
            free = self.plan.free(rows)
        room = self._rooms[0](rows, free)
        for counts in self._rooms[1:]:
            room = np.minimum(room, counts(rows, free))
        return room

    def accepts(self, rows: Rows) -> Mask:
        """Per row, whether every rule lets it take one more task."""
        return self.room_if_accepted(rows) > 0

    def room_if_accepted(self, rows: Rows, *, pooled: bool = False) -> I64:
        """Per row, how many tasks of the job it takes: `room`, or 0 where a rule that does not
        count rejects it. `pooled`: the rows come from a free-pool list, which the shared
        cached checks made and which a change to any of its machines' records drops
        (`ChoiceCache.pool_changed`): those checks are not applied again."""
        room: I64 = np.where(self.accepted(rows, pooled=pooled), self.room(rows), 0)
        return room

    def accepted(self, rows: Rows, *, pooled: bool = False) -> Mask:
        """Per row, whether every rule that does not count room accepts it (`pooled`: as in
        `room_if_accepted`)."""
        # Called for every chunk of a free-pool list a plan reads: one mask, built in place.
        mask = accepted_by_all(self.unshared if pooled else self.cached, rows)
        mask &= self.masks(rows)
        return mask

    def prune_msbs(self, msbs: list[int]) -> list[int]:
        for rule in self.filters:
            msbs = rule.prune_msbs(self.plan, msbs)
        return msbs

    # --- ranking -----------------------------------------------------------------------------

    def scores(self, rows: Rows, *, pool: bool) -> I64:
        """Per row, every scorer's bits in registry order; a pool-only scorer's are 0 unless
        `pool` (the rows are free-pool machines)."""
        scores = np.zeros(len(rows), np.int64)
        for scorer, bits in self._bits:
            scores <<= np.int64(bits)
            if bits and (pool or not scorer.pool_only):
                scores |= scorer.score(self.plan, rows)
        return scores

    def ranks_pool(self) -> bool:
        """Whether any scorer tells free-pool machines apart for this plan."""
        return any(scorer.ranks(self.plan) for scorer in self.scorers)

    def explained_parts(self) -> list[tuple[str, int, int]]:
        """(label, weight, bit) of every bit Explain reports: the scorers that rank every
        machine, not only the free pool's."""
        explained: list[tuple[str, int, int]] = []
        below = 0
        for scorer, bits in reversed(self._bits):
            parts = scorer.parts(self.plan) if bits else []
            if not scorer.pool_only:
                explained[:0] = [
                    (label, weight, below + len(parts) - 1 - position)
                    for position, (label, weight) in enumerate(parts)
                ]
            below += bits
        return explained

    # --- cache keys --------------------------------------------------------------------------

    def owned_key(self) -> Signature:
        """What the entitlement's machines that pass the cached checks depend on."""
        return ("owned", self.plan.entitlement.name, self._read(self._layout.owned_fields))

    def pool_key(self) -> Signature:
        """What a free-pool list depends on: the shared cached checks and the scores."""
        return ("pool", self._read(self._layout.pool_fields))

    def reason_key(self) -> Signature:
        """What the reason a job fits nowhere depends on: every filter, and the spread."""
        return ("reason", self.plan.entitlement.name, self._read(self._layout.reason_fields))

    def _read(self, fields: Iterable[Field]) -> bytes:
        """The values of `fields` as one JSON array."""
        spec, entitlement = self.plan.job.spec, self.plan.entitlement
        values: list[object] = []
        for of_job, path in fields:
            value: object = spec if of_job else entitlement
            for name in path:
                value = getattr(value, name)
            values.append(value)
        return pydantic_core.to_json(values)
