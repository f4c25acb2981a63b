"""Choosing machines for tasks: the entitlement's machines first, then the free pool, spread
over fault domains with a maximum skew, ranked by ordered preferences and best fit."""

from __future__ import annotations

import heapq
import itertools
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tether.allocator.cache import ChoiceCache, PoolEntry, signatures
from tether.allocator.index import NONE, UP, AllocationIndex, tasks_by_row
from tether.allocator.rules import (
    DATACENTER_RULE,
    Rows,
    Rule,
    RuleOutcome,
    accepted_by_all,
    affinity_rule,
    allowed_datacenters,
    apply_rules,
    effective_weights,
    machine_rules,
    ownership_rule,
    passes,
    predicate_text,
    preference_scores,
    quota_room,
    quota_text,
    readable_rule,
    rejections,
    resource_rules,
    slots,
)
from tether.model import Entitlement, FaultDomain, Job

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


@dataclass(slots=True)
class _Domain:
    """One fault domain's candidates for the job: the entitlement's machines (best first, with
    how many tasks each still takes), then machines pulled from the free pool one at a time."""

    code: int
    count: int
    rows: Rows = field(default_factory=lambda: _NO_ROWS)
    room: I64 = field(default_factory=lambda: _NO_AMOUNTS)
    scores: I64 = field(default_factory=lambda: _NO_AMOUNTS)
    position: int = 0
    pulled: int = NONE
    pulled_room: int = 0
    pool_msbs: list[int] = field(default_factory=list)
    pool_score: int = 0
    """The pool's best machine's preference and host profile bits when the plan began."""

    def head_score(self) -> int:
        if self.position < len(self.rows):
            return int(self.scores[self.position]) << 1
        return self.pool_score

    def owned_left(self) -> bool:
        return self.position < len(self.rows)


class Planner:
    """Places the tasks of one Place request on the index as it is now (pure: no store)."""

    def __init__(
        self, index: AllocationIndex, cache: ChoiceCache, job: Job, entitlement: Entitlement
    ) -> None:
        self.index = index
        self.cache = cache
        self.job = job
        self.entitlement = entitlement
        self.owner = index.owners.code(entitlement.name)
        # The quota first: a resource it names that no machine has yet gets its column before
        # the task's vector is built, so both have every column.
        index.vector(entitlement.quota.resources)
        self.need = index.vector(job.spec.task.resources)
        self.level = job.spec.placement.spread.level
        self.skew = job.spec.placement.spread.max_skew
        self.rules = machine_rules(index, job, entitlement)
        self.affinity_rules = [affinity_rule(index, a) for a in job.spec.placement.affinities]
        owned_key, pool_key = signatures(job, entitlement)
        self.key, self.pool_key = cache.key(owned_key), cache.key(pool_key)
        allowed = allowed_datacenters(job, entitlement)
        self._allowed_dcs = None if allowed is None else {index.dcs.code(dc) for dc in allowed}
        self.profile = index.profiles.find(entitlement.host_profile)
        self._free: dict[int, I64] = {}
        self.joined: set[int] = set()
        """Free-pool rows this plan moves into the entitlement."""
        self._machines_left = self._machine_quota()

    # --- the level's domains -----------------------------------------------------------------

    def _domain_column(self) -> npt.NDArray[np.int32]:
        match self.level:
            case FaultDomain.DC:
                return self.index.dc
            case FaultDomain.MSB:
                return self.index.msb
            case FaultDomain.RACK:
                return self.index.rack

    def _pool_msbs(self, tasks: int) -> dict[int, list[int]]:
        """MSBs with free-pool machines, by the domain of the level they belong to (for racks,
        enough racks for `tasks` tasks)."""
        index = self.index
        msbs = [
            msb
            for msb, rows in index.pool.items()
            if rows and (self._allowed_dcs is None or index.msb_dc[msb] in self._allowed_dcs)
        ]
        by_domain: dict[int, list[int]] = {}
        match self.level:
            case FaultDomain.DC:
                for msb in msbs:
                    by_domain.setdefault(index.msb_dc[msb], []).append(msb)
            case FaultDomain.MSB:
                by_domain = {msb: [msb] for msb in msbs}
            case FaultDomain.RACK:
                # Every empty rack is as good as another: offer enough of them, taken in turn
                # from each MSB so that the racks are spread too.
                wanted = max(2 * tasks, 64)
                racks = (index.msb_racks.get(msb, []) for msb in msbs)
                for rack in itertools.islice(_round_robin(racks), wanted):
                    by_domain[rack] = [index.rack_msb[rack]]
        return by_domain

    # --- quota -------------------------------------------------------------------------------

    def _machine_quota(self) -> dict[int, int] | None:
        limits = self.entitlement.quota.machines
        if not limits:
            return None
        owned = self.index.owned_hardware.get(self.owner, Counter())
        return {
            self.index.hardware.code(name): count - owned[self.index.hardware.code(name)]
            for name, count in limits.items()
        }

    # --- candidates --------------------------------------------------------------------------

    def free(self, row: int) -> I64:
        free = self._free.get(row)
        if free is None:
            free = self._free[row] = self.index.capacity[row] - self.index.used[row]
        return free

    def _free_rows(self, rows: Rows) -> I64:
        """Free resources of `rows` as this plan leaves them."""
        free: I64 = self.index.capacity[rows] - self.index.used[rows]
        if self._free:
            for position in np.flatnonzero(np.isin(rows, list(self._free))).tolist():
                free[position] = self._free[int(rows[position])]
        return free

    def _owned_candidates(self) -> Rows:
        index = self.index
        rows = self.cache.owned(
            self.key,
            self.owner,
            self.rules,
            lambda: np.fromiter(index.owned_rows(self.owner), np.intp),
        )
        return rows[index.readable[rows]]

    def _pool_list(self, msb: int) -> PoolEntry:
        index = self.index

        def build() -> tuple[Rows, I64]:
            # Datacenters (the entitlement's) and readability are checked when pulling, so that
            # entitlements share lists (and a record can turn readable again while the machine
            # stays in the pool).
            rows = np.fromiter(index.pool.get(msb, ()), np.intp)
            rows = rows[index.state[rows] == UP]
            for rule in self.rules:
                if rule.name != DATACENTER_RULE:
                    rows = rows[rule.accepts(rows)]
            free = index.capacity[rows] - index.used[rows]
            scores = self._pool_scores(rows)
            # The replica's own share of the pool first, in an order of its own: replicas
            # growing entitlements at once pull different machines.
            rank, share_order = self.cache.pool_shares(rows)
            order = np.lexsort((rows, share_order, free[:, 0], free[:, 1], -scores, rank))
            return rows[order], scores[order]

        return self.cache.pool(self.pool_key, msb, build)

    def _pool_scores(self, rows: Rows) -> I64:
        """Preference bits, then one bit for already carrying the entitlement's host profile."""
        carries = (
            (self.index.profile[rows] == self.profile)
            if self.profile != NONE
            else np.zeros(len(rows), np.bool_)
        )
        scores: I64 = (preference_scores(self.index, self.job, rows) << 1) | carries
        return scores

    def _pool_head(self, msb: int) -> int:
        """The score of the best machine still in the MSB's pool list (0: none)."""
        entry = self._pool_list(msb)
        _skip_gone(self.index, entry)
        return int(entry.scores[entry.start]) if entry.start < len(entry.rows) else 0

    def _pull(self, domain: _Domain) -> int | None:
        """The best free-pool machine of the domain that takes a task now, or None."""
        index = self.index
        for msb in domain.pool_msbs:
            entry = self._pool_list(msb)
            _skip_gone(index, entry)
            rows = entry.rows[entry.start :]
            if self.level is FaultDomain.RACK:
                # The MSB's list holds every rack of it.
                rows = rows[index.rack[rows] == domain.code]
            for start in range(0, len(rows), _POOL_CHUNK):
                chunk = rows[start : start + _POOL_CHUNK]
                fits = (
                    (index.owner[chunk] == NONE)
                    & (index.state[chunk] == UP)
                    & index.readable[chunk]
                    & accepted_by_all(self.rules, chunk)
                    & (slots(index.capacity[chunk] - index.used[chunk], self.need) > 0)
                    & accepted_by_all(self.affinity_rules, chunk)
                )
                for position in np.flatnonzero(fits).tolist():
                    row = int(chunk[position])
                    if row in self.joined or not self._within_machine_quota(row):
                        continue
                    return row
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
        index = self.index
        column = self._domain_column()
        placements: dict[int, int] = {}
        budget = quota_room(index, self.entitlement, self.need)
        counts = Counter(int(column[row]) for row in placed.values())
        for task, kept in (keep or {}).items():
            if task in indexes and budget > 0 and self._take(kept, check=True):
                placements[task] = kept
                counts[int(column[kept])] += 1
                budget -= 1
        pending = [task for task in indexes if task not in placements]
        domains = self._domains(counts, len(pending))
        heap = [self._heap_key(domain) for domain in domains.values()]
        heapq.heapify(heap)
        reason = ""
        for task in pending:
            if budget <= 0:
                chosen = len(placements)
                reason = quota_text(index, self.entitlement, self.need, chosen) or "quota exceeded"
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
        # Bands of max_skew keep every domain within max_skew of the least loaded one; within
        # a band, domains with room on the entitlement's own machines go first (stacking),
        # then the one whose best machine satisfies the most important preferences.
        owned_left = 0 if domain.owned_left() else 1
        return (
            domain.count // self.skew,
            owned_left,
            -domain.head_score(),
            domain.count,
            domain.code,
        )

    def _domains(self, counts: Counter[int], tasks: int) -> dict[int, _Domain]:
        rows = self._owned_candidates()
        if self.joined:
            # Pool machines a kept placement moved in are the entitlement's for this plan.
            rows = np.concatenate([rows, np.array(sorted(self.joined), np.intp)])
        rows = rows[accepted_by_all(self.affinity_rules, rows)]
        domains: dict[int, _Domain] = {}
        # Racks are too many for a sample to hold enough of them.
        sampled = self.level is not FaultDomain.RACK
        if sampled and len(rows) > max(_SAMPLE_MIN, _SAMPLE_FACTOR * tasks):
            domains = self._owned_domains(self._sample(rows, _SAMPLE_FACTOR * tasks), counts)
            room = sum(int(domain.room.sum()) for domain in domains.values())
            level = self.index.msbs if self.level is FaultDomain.MSB else self.index.dcs
            if room < 2 * tasks or len(domains) < min(tasks, len(level.names)):
                domains = {}
        if not domains and len(rows):
            domains = self._owned_domains(rows, counts)
        # Pool machines differ in score only by preferences and the host profile; without either
        # every domain's best pool machine scores 0 and reading them is wasted.
        ranked_pool = self.level is not FaultDomain.RACK and (
            bool(self.job.spec.placement.preferences) or self.profile != NONE
        )
        if self._can_grow():
            # Domains whose pool holds no machine for the job drop out at their first pull.
            for code, msbs in self._pool_msbs(tasks).items():
                domain = domains.get(code)
                if domain is None:
                    domain = domains[code] = _Domain(code, counts[code])
                domain.pool_msbs = msbs
                if ranked_pool:
                    domain.pool_score = max(self._pool_head(msb) for msb in msbs)
        return domains

    def _sample(self, rows: Rows, size: int) -> Rows:
        """About `size` of `rows` spread over the whole array (a stride that is prime to its
        length), starting at a place that differs per job."""
        size = max(size, _SAMPLE_MIN)
        start = zlib.crc32(self.job.handle.encode())
        picks = (start + np.arange(size, dtype=np.int64) * _SAMPLE_STRIDE) % len(rows)
        return rows[np.unique(picks)]

    def _owned_domains(self, rows: Rows, counts: Counter[int]) -> dict[int, _Domain]:
        """The entitlement's `rows` that take a task, by domain, best first."""
        index = self.index
        free = self._free_rows(rows)
        room = slots(free, self.need)
        fitting = room > 0
        rows, free, room = rows[fitting], free[fitting], room[fitting]
        scores = preference_scores(index, self.job, rows)
        codes = self._domain_column()[rows]
        order = np.lexsort((rows, free[:, 0], free[:, 1], -scores, codes))
        rows, room, scores, codes = rows[order], room[order], scores[order], codes[order]
        # One slice of the sorted arrays per domain: no Python loop over the machines.
        present, starts = np.unique(codes, return_index=True)
        ends = [*starts[1:].tolist(), len(codes)] if len(codes) else []
        return {
            code: _Domain(code, counts[code], rows[start:end], room[start:end], scores[start:end])
            for code, start, end in zip(present.tolist(), starts.tolist(), ends, strict=True)
        }

    def _can_grow(self) -> bool:
        left = self._machines_left
        return left is None or any(count > 0 for count in left.values())

    def _next_row(self, domain: _Domain) -> int | None:
        while domain.position < len(domain.rows):
            position = domain.position
            if domain.room[position] > 0:
                domain.room[position] -= 1
                if domain.room[position] == 0:
                    domain.position += 1
                row = int(domain.rows[position])
                self._take(row, check=False)
                return row
            domain.position += 1
        if domain.pulled_room > 0:
            domain.pulled_room -= 1
            self._take(domain.pulled, check=False)
            return domain.pulled
        if not domain.pool_msbs:
            return None
        pulled = self._pull(domain)
        if pulled is None:
            domain.pool_msbs = []
            return None
        self._take(pulled, check=False)
        domain.pulled = pulled
        domain.pulled_room = int(slots(self.free(pulled)[None, :], self.need)[0])
        return pulled

    def _take(self, row: int, *, check: bool) -> bool:
        """Charges one task to `row`, moving it into the entitlement if it is in the pool."""
        index = self.index
        free = self.free(row)
        if check:
            owner = int(index.owner[row])
            usable = bool(index.readable[row]) and (
                owner == self.owner
                or row in self.joined
                or (owner == NONE and index.state[row] == UP and self._within_machine_quota(row))
            )
            rows = np.array([row], np.intp)
            if (
                not usable
                or not len(passes([*self.rules, *self.affinity_rules], rows))
                or slots(free[None, :], self.need)[0] <= 0
            ):
                return False
        if index.owner[row] == NONE and row not in self.joined:
            self.joined.add(row)
            if self._machines_left is not None:
                self._machines_left[int(index.hw[row])] -= 1
        self._free[row] = free - self.need
        return True

    # --- explaining --------------------------------------------------------------------------

    def all_rules(self) -> list[Rule]:
        rules = [
            *self.rules,
            ownership_rule(self.index, self.entitlement),
            readable_rule(self.index),
            *self.affinity_rules,
            *resource_rules(self.index, self.need, self._free_rows),
        ]
        shortfall = quota_text(self.index, self.entitlement, self.need, 0)
        rules.append(
            Rule(
                "quota",
                "entitlement quota exceeded",
                lambda rows: np.full(len(rows), shortfall is None),
                lambda *_: shortfall or "",
            )
        )
        return rules

    def why_not(self) -> str:
        """Why one more task fits nowhere: each rule's rejections over the whole region.

        Going over a million machines takes a while, and jobs alike fail alike: the answer is
        kept for _REASON_TTL_S per signature and task size.
        """
        key = (self.key, self.need.tobytes(), self.level, self.skew)
        now = time.monotonic()
        known = self.cache.reasons.get(key)
        if known is not None and now - known[0] < _REASON_TTL_S:
            return known[1]
        rows = self.index.live_rows()
        machines = len(rows)
        # A reason, not an inventory: past _REASON_ROWS machines an evenly spread sample says
        # the same for a fraction of the cost (Explain still reads every machine).
        sampled = machines > _REASON_ROWS
        if sampled:
            rows = rows[:: -(-machines // _REASON_ROWS)]
        filtered = apply_rules(rows, self.all_rules())
        if len(filtered.survivors):
            reason = (
                f"{len(filtered.survivors)} machines fit one task but not within the spread "
                f"over {self.level.value} (max skew {self.skew}) or the entitlement's "
                "machine quota"
            )
        else:
            reason = rejections(filtered.outcomes, filtered.considered, details=True)
        if sampled:
            reason = f"in a sample of {len(rows)} of {machines} machines, {reason}"
        if len(self.cache.reasons) > _REASONS_KEPT:
            self.cache.reasons.clear()
        self.cache.reasons[key] = (now, reason)
        return reason


@dataclass(frozen=True, slots=True)
class Ranked:
    """A machine holding tasks of the job, and how it ranks for one more task."""

    machine: str
    tasks: list[int]
    rank: int
    preferences: list[str]


@dataclass(frozen=True, slots=True)
class PreferenceCount:
    rule: str
    weight: int
    matching: int


@dataclass(frozen=True, slots=True)
class Explanation:
    """Explain's answer: every hard rule's effect for one more task, and the ranking."""

    considered: int
    fitting: int
    entitlement_machines: int
    outcomes: list[RuleOutcome]
    preferences: list[PreferenceCount]
    chosen: list[Ranked]
    summary: str


def _skip_gone(index: AllocationIndex, entry: PoolEntry) -> None:
    """Moves the list's start past the rows ahead of its first usable pool member: they left
    the pool or are not up, and either change drops the list."""
    while entry.start < len(entry.rows):
        chunk = entry.rows[entry.start : entry.start + _POOL_CHUNK]
        in_pool = (index.owner[chunk] == NONE) & (index.state[chunk] == UP)
        if in_pool.any():
            entry.start += int(np.argmax(in_pool))
            return
        entry.start += len(chunk)


def _round_robin(lists: Iterator[list[int]]) -> Iterator[int]:
    """The first of each list, then the second of each, and so on."""
    for layer in itertools.zip_longest(*lists):
        yield from (item for item in layer if item is not None)


def explain(planner: Planner) -> Explanation:
    """Applies every rule for one more task of the job over the whole region and ranks the
    machines that pass, as `choose` would order them (the spread aside)."""
    index, job = planner.index, planner.job
    filtered = apply_rules(index.live_rows(), planner.all_rules())
    fitting = filtered.survivors
    scores = preference_scores(index, job, fitting)
    free = index.capacity[fitting] - index.used[fitting]
    order = np.lexsort(
        (fitting, free[:, 0], free[:, 1], -scores, index.owner[fitting] != planner.owner)
    )
    rank_of = {int(row): rank + 1 for rank, row in enumerate(fitting[order].tolist())}
    preferences = job.spec.placement.preferences
    weights = effective_weights(job)
    counts = [
        PreferenceCount(
            predicate_text(preference),
            weight,
            int(((scores >> (len(preferences) - 1 - i)) & 1).sum()),
        )
        for i, (preference, weight) in enumerate(zip(preferences, weights, strict=True))
    ]
    by_row = tasks_by_row(dict(sorted(index.held(job.handle).items())))
    chosen = []
    for row, tasks in sorted(by_row.items(), key=lambda item: index.ids[item[0]]):
        score = int(preference_scores(index, job, np.array([row], np.intp))[0])
        chosen.append(
            Ranked(
                index.ids[row],
                tasks,
                rank_of.get(row, 0),
                [
                    predicate_text(preference)
                    for i, preference in enumerate(preferences)
                    if score >> (len(preferences) - 1 - i) & 1
                ],
            )
        )
    rejected = rejections(filtered.outcomes, filtered.considered, details=False)
    if len(fitting):
        summary = f"{len(fitting)} of {filtered.considered} machines fit"
        summary += f"; {rejected}" if rejected else ""
    else:
        summary = rejected
    return Explanation(
        filtered.considered,
        len(fitting),
        len(index.owned.get(planner.owner, ())),
        filtered.outcomes,
        counts,
        chosen,
        summary,
    )
