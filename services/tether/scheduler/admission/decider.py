"""The admission decider of the entitlement trees whose root maps to this leader's shard: it
feeds their queues from the leader's mirrors, decides, and writes the decisions, fenced by the
leader key, the root's shard-map entry and the tree's quota ledger."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime

from tether import metrics
from tether.aio import every
from tether.model import parse_job_handle, same_but_updated_at, to_json
from tether.model.admission import Admission, AdmissionEventKind, AdmissionState, QueueStatus
from tether.scheduler.admission.holding import holding_of
from tether.scheduler.admission.proposals import Proposal
from tether.scheduler.admission.queued import QueuedJob
from tether.scheduler.admission.queues import AdmissionQueues, Decision
from tether.scheduler.admission.status import set_gauges, tree_statuses
from tether.scheduler.allocator_client import AllocatorError, PreemptionCheck
from tether.scheduler.executor import NotLeader
from tether.scheduler.state import ShardState
from tether.store import (
    Compare,
    Get,
    Op,
    Put,
    RangeResult,
    Store,
    StoreError,
    key_missing,
    keys,
    mod_revision_is,
)
from tether.store.election import Fence

_log = logging.getLogger(__name__)

_CHUNK = 50
"""Decisions per transaction (each one key, plus the fences and the ledger)."""


class Decider:
    """Decides admissions for the trees rooted on this shard, one pass at a time."""

    def __init__(
        self,
        store: Store,
        state: ShardState,
        fence: Fence,
        identity: str,
        non_preemptible_priority: int,
        allocator: PreemptionCheck,
        *,
        lease: int = 0,
        interval_s: float = 5.0,
    ) -> None:
        self._store = store
        self._state = state
        self._fence = fence
        self._identity = identity
        self._allocator = allocator
        self._lease = lease
        """The leader's lease: the published status goes with the term."""
        self._interval_s = interval_s
        self.queues = AdmissionQueues([], non_preemptible_priority)
        self._roots: dict[str, str] = {}
        """Entitlement -> its tree's root, for the trees decided here."""
        self._touched: set[str] = set()
        self._reshape = True
        self._wake = asyncio.Event()
        # Root -> the ledger revision our last write left, before the mirror shows it.
        self._written: dict[str, int] = {}
        self._published_due = 0.0
        self._published: dict[str, QueueStatus] = {}
        """Root -> the status last written in this term."""
        self.passes = 0
        """Completed passes: a test that something was not admitted waits for one more."""

    def touch(self, handle: str) -> None:
        """Something of the job its queue entry depends on changed: its record, admission, or
        what its holding counts (`holding_inputs`)."""
        self._touched.add(handle)
        self._wake.set()

    def reshaped(self) -> None:
        """The entitlements or the shard map changed: which trees are ours, and their quotas."""
        self._reshape = True
        self._wake.set()

    async def run(self) -> None:
        """Decides after every change, and every `interval_s` (rate limits lapse by time)."""
        await every(self._interval_s, self.decide_once, wake=self._wake, now=True)

    async def decide_once(self) -> None:
        if self._reshape:
            self._reshape = False
            self._rebuild()
        else:
            touched, self._touched = self._touched, set()
            for handle in touched:
                self._refresh(handle)
        await self._catch_up()
        # What the decisions are based on: a ledger that moves on after this refuses them.
        seen = {root: self._ledger_revision(root) for root in set(self._roots.values())}
        now = datetime.now(UTC)
        with metrics.ADMISSION_PASS_SECONDS.time():
            outcome = self.queues.decide(now)
        decisions = list(outcome.decisions)
        for proposal in outcome.proposals:
            decisions += await self._preempt(proposal, now)
        if decisions:
            await self._write(decisions, seen)
        if now.timestamp() >= self._published_due:
            self._published_due = now.timestamp() + self._interval_s
            await self._publish(now)
        if decisions:
            # What was just admitted shows within a second.
            self._published_due = min(self._published_due, now.timestamp() + 1.0)
        self.passes += 1

    async def _preempt(self, proposal: Proposal, now: datetime) -> list[Decision]:
        """Preempts for the proposal the victims the allocator chose machine by machine, with
        as many more as the quota needs; notes on the head why not if its tasks would never
        find machines or the victims would break a rule."""
        standing = self.queues.standing(proposal)
        if standing is None:
            return []  # the next pass plans it again
        try:
            fit = await self._allocator.check_preemption(
                standing.head, standing.placing, self.queues.stopping(standing), standing.budget
            )
        except AllocatorError as error:
            # Not preempting blind: the next pass asks again.
            _log.warning("preempting for %s waits: %s", standing.head, error)
            return []
        chosen = fit.chosen if fit.fits else None
        decisions, refusal = self.queues.answer(standing, chosen, fit.reason, now)
        if refusal is not None:
            metrics.PREEMPTIONS_REFUSED.labels(refusal.rule).inc()
        return decisions

    # --- the queues' state from the mirrors ------------------------------------------------

    def _rebuild(self) -> None:
        every = {
            stored.value.name: stored.value for stored in self._state.entitlements.items.values()
        }
        self._roots = self._state.trees()
        self.queues.set_entitlements(every[name] for name in self._roots)
        handles = {stored.value.handle for stored in self._state.jobs.items.values()}
        for handle in handles | set(self.queues.jobs):
            self._refresh(handle)
        self._touched.clear()

    def _refresh(self, handle: str) -> None:
        entitlement, name = parse_job_handle(handle)
        job = self._state.jobs.items.get(keys.job(entitlement, name))
        if entitlement not in self._roots or job is None:
            self.queues.remove(handle)
            return
        stored = self._state.admissions.items.get(keys.admission(entitlement, name))
        spec = job.value.spec
        if stored is None and job.value.has_admission:
            # Its record comes through another watch: until it shows, the job is not known.
            self.queues.remove(handle)
            return
        if stored is None:
            record, revision = Admission.admitted_whole(spec, job.value.created_at), 0
        else:
            record, revision = stored.value, stored.revision
        holding = holding_of(job.value, record, self._state.tasks_of(handle))
        self.queues.put(
            QueuedJob(entitlement, record, revision, holding, job.value.deleting, spec.suspended)
        )

    async def _catch_up(self) -> None:
        """Waits until the admissions mirror holds every admission up to the newest ledger
        revision of our trees: a decision must see every admission made before it."""
        newest = max((stored.revision for stored in self._state.ledgers.items.values()), default=0)
        await self._state.admissions.mirror.wait_for(newest)

    def _ledger_revision(self, root: str) -> int:
        stored = self._state.ledgers.items.get(keys.quota_ledger(root))
        return max(0 if stored is None else stored.revision, self._written.get(root, 0))

    # --- writing ---------------------------------------------------------------------------

    async def _write(self, decisions: list[Decision], seen: Mapping[str, int]) -> None:
        # A pass may change one job twice (admitted, then noted): its last record is the one.
        latest = {decision.admission.job: decision for decision in decisions}
        by_root: defaultdict[str, list[Decision]] = defaultdict(list)
        for decision in latest.values():
            entitlement, _ = parse_job_handle(decision.admission.job)
            by_root[self._roots[entitlement]].append(decision)
        for root, mine in by_root.items():
            for start in range(0, len(mine), _CHUNK):
                chunk = mine[start : start + _CHUNK]
                if not await self._commit(root, chunk, seen.get(root, 0)):
                    for decision in mine[start:]:
                        self._refresh(decision.admission.job)
                    break

    async def _commit(self, root: str, decisions: list[Decision], seen: int) -> bool:
        owned_at = self._state.owned_at(root)
        if owned_at is None:
            return False
        ledger = keys.quota_ledger(root)
        # A chunk after the first follows this pass's own write.
        seen = max(seen, self._written.get(root, 0))
        compares: list[Compare] = [
            self._fence.compare(),
            mod_revision_is(keys.shard_assignment(root), owned_at),
            mod_revision_is(ledger, seen) if seen else key_missing(ledger),
        ]
        ops: list[Op] = [Put(ledger, self._identity.encode())]
        for decision in decisions:
            entitlement, name = parse_job_handle(decision.admission.job)
            key = keys.admission(entitlement, name)
            compares.append(
                mod_revision_is(key, decision.revision) if decision.revision else key_missing(key)
            )
            ops.append(Put(key, to_json(decision.admission)))
        record_keys = [
            keys.admission(*parse_job_handle(decision.admission.job)) for decision in decisions
        ]
        reads = [Get(self._fence.key), Get(ledger), *(Get(key) for key in record_keys)]
        result = await self._store.txn(compares, ops, reads)
        if result.succeeded:
            self._written[root] = result.revision
            for decision in decisions:
                job = self.queues.jobs.get(decision.admission.job)
                if job is not None and job.admission == decision.admission:
                    job.revision = result.revision
            metrics.ADMISSION_WRITES.labels("written").inc(len(decisions))
            for decision in decisions:
                _count(decision)
            return True
        leader, *found = result.results
        assert isinstance(leader, RangeResult)
        if not self._fence.holds_in(leader):
            raise NotLeader(f"{self._fence.key} no longer holds this replica")
        _log.info("tree %s: admissions changed under us; deciding again", root)
        metrics.ADMISSION_WRITES.labels("conflict").inc(len(decisions))
        # Wait for the mirrors to show what beat us: the ledger and the records as they are now
        # (not the store's revision: a prefix's mirror only moves with changes under it).
        newest = max(
            (kv.mod_revision for read in found if isinstance(read, RangeResult) for kv in read.kvs),
            default=0,
        )
        ledger_read = found[0]
        assert isinstance(ledger_read, RangeResult)
        await self._state.ledgers.mirror.wait_for(
            max((kv.mod_revision for kv in ledger_read.kvs), default=0)
        )
        await self._state.admissions.mirror.wait_for(newest)
        self._wake.set()
        return False

    async def _publish(self, now: datetime) -> None:
        """Writes each tree's QueueStatus that changed (on the leader's lease, fenced), and the
        gauges. An idle tree writes nothing: each write wakes every watcher."""
        statuses = tree_statuses(self.queues, self._roots, self._identity, now)
        set_gauges(statuses)
        changed = [
            status
            for status in statuses
            if (last := self._published.get(status.root)) is None
            or not same_but_updated_at(last, status)
        ]
        puts: list[Op] = [
            Put(keys.queue_status(status.root), to_json(status), self._lease) for status in changed
        ]
        if not puts:
            return
        try:
            await self._store.txn([self._fence.compare()], puts)
        except StoreError as error:
            _log.info("publishing the queues' status failed: %s", error)
        else:
            self._published |= {status.root: status for status in changed}


def _count(decision: Decision) -> None:
    """The counters of one decision written."""
    record = decision.admission
    event = record.history[-1] if record.history else None
    if event is None or event.at != record.updated_at:
        return
    if event.kind is AdmissionEventKind.ADMITTED:
        metrics.ADMISSIONS.labels("start").inc()
        metrics.QUEUE_WAIT_SECONDS.observe((event.at - record.queued_at).total_seconds())
    elif event.kind is AdmissionEventKind.RESIZED and record.state is AdmissionState.ADMITTED:
        metrics.ADMISSIONS.labels("grow").inc()
    elif event.kind is AdmissionEventKind.PREEMPTED and event.cause is not None:
        metrics.PREEMPTIONS.labels(event.cause.value).inc(event.tasks)
