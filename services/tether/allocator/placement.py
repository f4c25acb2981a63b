"""Choosing machines for tasks: the entitlement's machines first, then the free pool, spread
over fault domains, ranked by the registered rules (`rules.registry`) and best fit."""

from __future__ import annotations

import heapq
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tether.allocator.cache import ChoiceCache, PoolEntry
from tether.allocator.ephemeral import EphemeralNeed
from tether.allocator.index import NONE, UP, AllocationIndex
from tether.allocator.rules import registry
from tether.allocator.rules.base import Plan
from tether.allocator.rules.checks import Check, Mask, Rows, apply_checks, rejections
from tether.allocator.rules.pipeline import Pipeline, best_first
from tether.allocator.rules.quota import machines_left, quota_check, quota_room, quota_text
from tether.model import Entitlement, Job

I64 = npt.NDArray[np.int64]

# Explaining a failure reads every machine (about 0.1 s at a million); a full region fails
# many jobs of few kinds, so one answer serves its kind for a while.
_REASON_TTL_S = 30.0
_REASON_ROWS = 50_000
_REASONS_KEPT = 10_000
_NO_ROWS: Rows = np.zeros(0, np.intp)
_NO_AMOUNTS: I64 = np.zeros(0, np.int64)
# Rows of a free-pool list examined at once when looking for the next machine that fits.
_POOL_CHUNK = 64
# An entitlement with more machines than this, and than _SAMPLE_FACTOR per task of the job,
# is planned on a sample of its machines (as Borg scores a random sample of feasible machines):
# sorting all of a big entitlement's machines for every job would cost milliseconds. The sample
# is kept only if it has room for twice the tasks in as many domains as the spread wants.
_SAMPLE_MIN = 2048
_SAMPLE_FACTOR = 16
_SAMPLE_STRIDE = 1_000_003


@dataclass(frozen=True, slots=True)
class Choice:
    """Rows chosen for tasks, rows moved from the free pool into the entitlement, and why the
    other tasks have none."""

    placements: dict[int, int]
    joined: set[int]
    unplaced: dict[int, str]


@dataclass(frozen=True, slots=True)
class Released:
    """The index as a preemption would leave it (`preemption.released_by`)."""

    freed: Mapping[int, I64]
    """Row -> the resources the stopped tasks free on it."""
    vacated: frozenset[int]
    """Rows of other entitlements the stopped tasks leave empty: back in the free pool."""
    own: I64
    """What the stopped tasks of the planned job's own entitlement free of its quota."""


@dataclass(frozen=True, slots=True)
class _Owned:
    """The entitlement's machines that take a task, grouped by domain and best first within
    each: the arrays every `_Domain` of a plan reads its own slice of."""

    rows: Rows
    room: I64
    """How many tasks each still takes (the plan counts it down)."""
    scores: I64
    """The rows' scores (`Pipeline.scores`), to compare with the pool's."""


_NO_OWNED = _Owned(_NO_ROWS, _NO_AMOUNTS, _NO_AMOUNTS)


@dataclass(slots=True)
class _Domain:
    """One fault domain's candidates for the job: the entitlement's machines (`owned` from
    `position` to `end`), then machines pulled from the free pool one at a time."""

    code: int
    count: int
    owned: _Owned = _NO_OWNED
    position: int = 0
    end: int = 0
    pulled: int = NONE
    pulled_room: int = 0
    pool_msbs: Sequence[int] = ()
    pool_score: int = 0
    """The score of the pool's best machine when the plan began."""

    def head_score(self) -> int:
        if self.position < self.end:
            return int(self.owned.scores[self.position])
        return self.pool_score

    def owned_left(self) -> bool:
        return self.position < self.end


class Planner:
    """Places the tasks of one Place request on the index as it is now, or as it would be with
    some tasks `released` (pure: no store)."""

    def __init__(
        self,
        index: AllocationIndex,
        cache: ChoiceCache,
        job: Job,
        entitlement: Entitlement,
        released: Released | None = None,
    ) -> None:
        self.index = index
        self.cache = cache
        self.job = job
        self.entitlement = entitlement
        self.owner = index.owners.code(entitlement.name)
        # What it may borrow counts: its tree's decider admitted the job within the tree.
        quota = index.vector(entitlement.ceiling)
        if released is not None:
            quota = quota + released.own[: len(quota)]
        resources = job.spec.task.resources
        self.ephemeral = EphemeralNeed.of(index, entitlement, resources)
        if self.ephemeral.labels:
            # A label the entitlement set is its own, even where machines offer one alike.
            machines_offer = {
                k: v for k, v in resources.extra.items() if k not in self.ephemeral.labels
            }
            resources = resources.model_copy(update={"extra": machines_offer})
        self.need = index.vector(resources)
        self._need_all = np.concatenate([self.need, self.ephemeral.amounts])
        """`need` and the ephemeral resources: what a task takes of `free` (a column each)."""
        self.plan = Plan(
            index, job, entitlement, self.owner, self.need, quota, self.ephemeral, self._free_rows
        )
        self.rules = Pipeline(self.plan)
        self.key = cache.key(self.rules.owned_key())
        self.pool_key = cache.key(self.rules.pool_key())
        self._free: dict[int, I64] = {}
        self.joined: set[int] = set()
        """Free-pool rows this plan moves into the entitlement."""
        self._machines_left = machines_left(self.plan)
        self._vacated: frozenset[int] = frozenset()
        """Rows of other entitlements this plan sees back in the free pool."""
        self._hypothetical = released is not None
        if released is not None:
            self._assume(released)

    def _assume(self, released: Released) -> None:
        index = self.index
        for row, amount in released.freed.items():
            if index.owner[row] == self.owner or row in released.vacated:
                # What the stopped tasks hold of ephemeral resources stays counted: a plan
                # over them errs on the side of fewer tasks.
                self._free[row] = self.free(row)
                self._free[row][: len(amount)] += amount
        self._vacated = frozenset(row for row in released.vacated if index.state[row] == UP)

    # --- candidates --------------------------------------------------------------------------

    def free(self, row: int) -> I64:
        free = self._free.get(row)
        if free is None:
            if self.ephemeral.labels:
                free = self._index_free(np.array([row], np.intp))[0]
            else:
                free = self.index.free[row].copy()
            self._free[row] = free
        return free

    def _index_free(self, rows: Rows) -> I64:
        """Free resources of `rows` as the index has them, ephemeral ones last."""
        free = _free_of(self.index, rows)
        if self.ephemeral.labels:
            free = np.hstack([free, self.ephemeral.free(self.index, rows)])
        return free

    def _free_rows(self, rows: Rows) -> I64:
        """Free resources of `rows` as this plan leaves them."""
        free = self._index_free(rows)
        if self._free:
            # A pool chunk is checked per pulled machine: a set lookup per row beats np.isin's
            # sort there; a whole entitlement's rows go the other way.
            if len(rows) <= _POOL_CHUNK:
                listed = rows.tolist()
                if self._free.keys().isdisjoint(listed):
                    return free
                positions = [p for p, row in enumerate(listed) if row in self._free]
            else:
                positions = np.flatnonzero(np.isin(rows, list(self._free))).tolist()
            for position in positions:
                free[position] = self._free[int(rows[position])]
        return free

    def _owned_candidates(self) -> Rows:
        """The entitlement's machines the cached checks accept."""
        index = self.index
        return self.cache.owned(
            self.key,
            self.owner,
            lambda: self.rules.cached,
            lambda: np.fromiter(index.owned_rows(self.owner), np.intp),
        )

    def _pool_list(self, msb: int) -> PoolEntry:
        index = self.index

        def build() -> tuple[Rows, I64]:
            # Only the checks alike for every entitlement: entitlements share the lists, and
            # the rest is checked when pulling (a record can turn readable again while the
            # machine stays in the pool).
            rows = np.fromiter(index.pool_rows(msb), np.intp)
            rows = rows[index.state[rows] == UP]
            for check in self.rules.shared:
                rows = rows[check.accepts(rows)]
            free = _free_of(index, rows)
            scores = self.rules.scores(rows, pool=True)
            # The replica's own share of the pool first, in an order of its own: replicas
            # growing entitlements at once pull different machines.
            rank, share_order = self.cache.pool_shares(rows)
            order = best_first(rows, scores, free, first=(rank,), ties=(share_order,))
            return rows[order], scores[order]

        return self.cache.pool(self.pool_key, msb, build)

    def _pool_head(self, msb: int) -> int:
        """The score of the best machine still in the MSB's pool list (0: none)."""
        entry = self._pool_list(msb)
        _skip_gone(self.index, entry)
        return int(entry.scores[entry.start]) if entry.start < len(entry.rows) else 0

    def _pull(self, domain: _Domain) -> tuple[int, int] | None:
        """The best free-pool machine of the domain that takes a task now, with how many it
        takes, or None."""
        index = self.index
        for msb in domain.pool_msbs:
            entry = self._pool_list(msb)
            _skip_gone(index, entry)
            rows = self.spread.in_domain(entry.rows[entry.start :], domain.code)
            for start in range(0, len(rows), _POOL_CHUNK):
                chunk = rows[start : start + _POOL_CHUNK]
                room = self.rules.room_if_accepted(chunk, pooled=True)
                for position in np.flatnonzero(_in_pool(index, chunk) & (room > 0)).tolist():
                    row = int(chunk[position])
                    if row in self.joined or not self._within_machine_quota(row):
                        continue
                    return row, int(room[position])
        return None

    def _within_machine_quota(self, row: int) -> bool:
        if self._machines_left is None:
            return True
        return self._machines_left.get(int(self.index.hw[row]), 0) > 0

    # --- choosing ----------------------------------------------------------------------------

    def choose(
        self,
        indexes: Sequence[int],
        placed: Mapping[int, int],
        keep: Mapping[int, int] | None = None,
    ) -> Choice:
        """Picks a row for each task of `indexes`.

        `placed` holds the rows of the job's other tasks (they count for the spread); `keep`
        proposes rows for some of `indexes` (an earlier attempt's choice after a conflict),
        which are kept where they still fit and chosen again where not.
        """
        spread = self.spread = registry.SPREAD(self.plan, placed.values())
        placements: dict[int, int] = {}
        budget = quota_room(self.plan)
        for task, kept in (keep or {}).items():
            if task in indexes and budget > 0 and self._take(kept, check=True):
                placements[task] = kept
                spread.counts[int(spread.column[kept])] += 1
                budget -= 1
        pending = [task for task in indexes if task not in placements]
        domains = self._domains(len(pending))
        heap = [self._heap_key(domain) for domain in domains.values()]
        heapq.heapify(heap)
        reason = ""
        for task in pending:
            if budget <= 0:
                reason = quota_text(self.plan, len(placements)) or "quota exceeded"
                break
            row: int | None = None
            while heap and row is None:
                domain = domains[heapq.heappop(heap)[-1]]
                row = self._next_row(domain)
                if row is not None:
                    domain.count += 1
                    heapq.heappush(heap, self._heap_key(domain))
            if row is None:
                reason = "no machine fits: " + self.why_not()
                break
            placements[task] = row
            budget -= 1
        # The tasks are identical and space only shrinks: once one fits nowhere, none does.
        unplaced = {task: reason for task in pending if task not in placements}
        if unplaced and self.job.spec.placement.gang:
            why = f"gang job: {len(placements)} of {len(indexes)} tasks fit, so none is placed"
            return Choice({}, set(), dict.fromkeys(indexes, f"{why}; {reason}"))
        return Choice(placements, set(self.joined), unplaced)

    def _heap_key(self, domain: _Domain) -> tuple[int, int, int, int, int]:
        # The spread's band first; within a band, domains with room on the entitlement's own
        # machines go first (stacking), then the one whose best machine scores highest.
        owned_left = 0 if domain.owned_left() else 1
        return (
            self.spread.band(domain.count),
            owned_left,
            -domain.head_score(),
            domain.count,
            domain.code,
        )

    def _domains(self, tasks: int) -> dict[int, _Domain]:
        spread = self.spread
        rows = self._owned_candidates()
        # Pool machines a kept placement moved in are the entitlement's for this plan, and so
        # are the machines it sees vacated (within the machine quota): they stack first.
        joining = self.joined | {row for row in self._vacated if self._within_machine_quota(row)}
        if joining:
            rows = np.concatenate([rows, np.array(sorted(joining), np.intp)])
        rows = rows[self.rules.masks(rows)]
        domains: dict[int, _Domain] = {}
        if not spread.by_machine and len(rows) > max(_SAMPLE_MIN, _SAMPLE_FACTOR * tasks):
            owned, domains = self._owned_domains(self._sample(rows, _SAMPLE_FACTOR * tasks))
            room = int(owned.room.sum())
            if room < 2 * tasks or len(domains) < min(tasks, spread.domains_at_level()):
                domains = {}
        if not domains and len(rows):
            _, domains = self._owned_domains(rows)
        # Without a scorer that tells pool machines apart, every domain's best pool machine
        # scores 0 and reading them is wasted.
        ranked_pool = not spread.by_machine and self.rules.ranks_pool()
        if self._can_grow():
            # Domains whose pool holds no machine for the job drop out at their first pull.
            msbs = self.rules.prune_msbs(self.index.pool_msbs())
            for code, domain_msbs in spread.pool_domains(msbs, tasks).items():
                domain = domains.get(code)
                if domain is None:
                    domain = domains[code] = _Domain(code, spread.counts[code])
                domain.pool_msbs = domain_msbs
                if ranked_pool:
                    domain.pool_score = max(self._pool_head(msb) for msb in domain_msbs)
        return domains

    def _sample(self, rows: Rows, size: int) -> Rows:
        """About `size` of `rows` spread over the whole array (a stride that is prime to its
        length), starting at a place that differs per job."""
        size = max(size, _SAMPLE_MIN)
        start = zlib.crc32(self.job.handle.encode())
        picks = (start + np.arange(size, dtype=np.int64) * _SAMPLE_STRIDE) % len(rows)
        # The stride is prime: the picks repeat only if it divides the length.
        picks = np.unique(picks) if len(rows) % _SAMPLE_STRIDE == 0 else np.sort(picks)
        return np.take(rows, picks)

    def _owned_domains(self, rows: Rows) -> tuple[_Owned, dict[int, _Domain]]:
        """The entitlement's `rows` that take a task, best first within each domain, and the
        domains, each a range of them."""
        free = self._free_rows(rows)
        room = self.rules.room(rows, free)
        fitting = room > 0
        rows, free, room = rows[fitting], free[fitting], room[fitting]
        scores = self.rules.scores(rows, pool=False)
        codes = self.spread.column[rows]
        order = best_first(rows, scores, free, first=(codes,))
        owned = _Owned(rows[order], room[order], scores[order])
        # One range of the sorted arrays per domain: no Python loop over the machines.
        present, starts = np.unique(codes[order], return_index=True)
        ends = [*starts[1:].tolist(), len(rows)] if len(rows) else []
        counts = self.spread.counts
        return owned, {
            code: _Domain(code, counts[code], owned, start, end)
            for code, start, end in zip(present.tolist(), starts.tolist(), ends, strict=True)
        }

    def _can_grow(self) -> bool:
        left = self._machines_left
        return left is None or any(count > 0 for count in left.values())

    def _next_row(self, domain: _Domain) -> int | None:
        owned = domain.owned
        while domain.position < domain.end:
            position = domain.position
            if owned.room[position] > 0:
                owned.room[position] -= 1
                if owned.room[position] == 0:
                    domain.position += 1
                row = int(owned.rows[position])
                self._take(row, check=False)
                return row
            domain.position += 1
        if domain.pulled_room > 0:
            domain.pulled_room -= 1
            self._take(domain.pulled, check=False)
            return domain.pulled
        if not domain.pool_msbs:
            return None
        found = self._pull(domain)
        if found is None:
            domain.pool_msbs = ()
            return None
        pulled, room = found
        self._take(pulled, check=False)
        domain.pulled, domain.pulled_room = pulled, room - 1
        return pulled

    def _take(self, row: int, *, check: bool) -> bool:
        """Charges one task to `row`, moving it into the entitlement if it is in the pool."""
        index = self.index
        free = self.free(row)
        if check:
            owner = int(index.owner[row])
            usable = (
                owner == self.owner
                or row in self.joined
                or (owner == NONE and index.state[row] == UP and self._within_machine_quota(row))
            )
            if not usable or not self.rules.accepts(np.array([row], np.intp))[0]:
                return False
        if (index.owner[row] == NONE or row in self._vacated) and row not in self.joined:
            self.joined.add(row)
            if self._machines_left is not None:
                self._machines_left[int(index.hw[row])] -= 1
        self._free[row] = free - self._need_all
        return True

    # --- explaining --------------------------------------------------------------------------

    def all_checks(self) -> list[Check]:
        """Every rule's checks for one more task, then the entitlement's resource quota."""
        return [*self.rules.checks, quota_check(self.plan)]

    def why_not(self) -> str:
        """Why one more task fits nowhere: each rule's rejections over the whole region.

        Going over a million machines takes a while, and jobs alike fail alike: the answer is
        kept for _REASON_TTL_S per signature and task size.
        """
        key = self.rules.reason_key()
        now = time.monotonic()
        known = None if self._hypothetical else self.cache.reasons.get(key)
        if known is not None and now - known[0] < _REASON_TTL_S:
            return known[1]
        rows = self.index.live_rows()
        machines = len(rows)
        # A reason, not an inventory: past _REASON_ROWS machines an evenly spread sample says
        # the same for a fraction of the cost (Explain still reads every machine).
        sampled = machines > _REASON_ROWS
        if sampled:
            rows = rows[:: -(-machines // _REASON_ROWS)]
        filtered = apply_checks(rows, self.all_checks())
        if len(filtered.survivors):
            spread = self.job.spec.placement.spread
            reason = (
                f"{len(filtered.survivors)} machines fit one task but not within the spread "
                f"over {spread.level.value} (max skew {spread.max_skew}) or the entitlement's "
                "machine quota"
            )
        else:
            reason = rejections(filtered.outcomes, filtered.considered, details=True)
        if sampled:
            reason = f"in a sample of {len(rows)} of {machines} machines, {reason}"
        if self._hypothetical:
            return reason  # not the index as it is: kept, it would answer Place requests
        if len(self.cache.reasons) > _REASONS_KEPT:
            self.cache.reasons.clear()
        self.cache.reasons[key] = (now, reason)
        return reason


def _free_of(index: AllocationIndex, rows: Rows) -> I64:
    """Free resources of `rows` as the index has them (`take`: fancy indexing of a
    two-dimensional column costs four times as much)."""
    free: I64 = np.take(index.free, rows, axis=0)
    return free


def _in_pool(index: AllocationIndex, rows: Rows | np.intp) -> Mask:
    """Per row (or for one), whether it is still a free-pool machine that is up."""
    in_pool: Mask = (index.owner[rows] == NONE) & (index.state[rows] == UP)
    return in_pool


def _skip_gone(index: AllocationIndex, entry: PoolEntry) -> None:
    """Moves the list's start past the rows ahead of its first usable pool member: they left
    the pool or are not up, and either change drops the list."""
    # Most plans find the head still in the pool: one row read, not a chunk.
    if entry.start < len(entry.rows) and _in_pool(index, entry.rows[entry.start]):
        return
    while entry.start < len(entry.rows):
        chunk = entry.rows[entry.start : entry.start + _POOL_CHUNK]
        in_pool = _in_pool(index, chunk)
        if in_pool.any():
            entry.start += int(np.argmax(in_pool))
            return
        entry.start += len(chunk)
