"""The scheduler service: one replica of a shard, standing by or leading and reconciling jobs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tether import metrics
from tether.aio import cancel_and_wait, every, first_of
from tether.model import (
    OperationState,
    RegionConfig,
    ShardStatus,
    from_json,
    parse_job_handle,
    same_but_updated_at,
    to_json,
)
from tether.scheduler.admission.decider import Decider
from tether.scheduler.allocator_client import AllocatorClient, AllocatorError
from tether.scheduler.executor import Executor, NotLeader, NotOwner, Outcome
from tether.scheduler.plan import OperationWrite
from tether.scheduler.reconciler import plan_job
from tether.scheduler.settings import SchedulerSettings
from tether.scheduler.state import ShardState
from tether.scheduler.taskcontrol import (
    ControllerClient,
    ControllerFailed,
    Pending,
    control_request,
    default_acks,
)
from tether.service import Service
from tether.store import Put, Store, StoreError, keys
from tether.store.election import Election, ElectionKeys, Leadership

_log = logging.getLogger(__name__)

_RETRY_S = 1.0
# How long a reconcile waits for the mirrors to show its own writes, so that the next reconcile
# of the job does not act on what it has just changed.
_CATCH_UP_S = 5.0


class Scheduler(Service):
    """A replica of one shard's scheduler. It owns `store` and closes it on `stop()`."""

    def __init__(
        self,
        store: Store,
        shard: str,
        settings: SchedulerSettings | None = None,
        *,
        identity: str | None = None,
    ) -> None:
        self.name = f"scheduler {shard}"
        self.shard = shard
        self._store = store
        self._settings = settings or SchedulerSettings()
        self.election = Election(
            store,
            ElectionKeys.of_shard(shard),
            self._settings.lease_ttl_s,
            identity,
            liveness_host=self._settings.liveness_host,
        )
        self.leading = asyncio.Event()
        """Set while this replica leads and its mirrors are loaded."""
        self.membership_checks = 0
        """How often the replica found its shard missing from the region config."""
        self.reconciled: dict[str, int] = {}
        """Job handle -> the revision of its entitlement's tasks mirror that the job's last
        completed reconcile planned from, in any term: a test that something was not done waits
        for a reconcile that saw the records it would have acted on."""
        self._main: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._main = asyncio.create_task(self._serve(), name=self.name)

    async def stop(self) -> None:
        await cancel_and_wait(self._main)
        self._main = None
        await self.election.close()
        await self._store.close()

    async def _serve(self) -> None:
        region = await self._await_membership()
        defer_s = 0.0
        while True:
            leadership = await self.election.campaign(defer_s=defer_s)
            metrics.SCHEDULER_LEADER_TERMS.labels("started").inc()
            try:
                await Term(
                    self._store,
                    self.shard,
                    self._settings,
                    leadership,
                    self.leading,
                    region,
                    self.reconciled,
                ).run()
            except Exception:
                _log.exception("shard %s: leading failed; standing by again", self.shard)
                await asyncio.sleep(_RETRY_S)
            finally:
                metrics.SCHEDULER_LEADER_TERMS.labels("lost").inc()
                self.leading.clear()
                await self.election.resign()
            _log.warning("shard %s: no longer leading", self.shard)
            # Handed over (a failover): stand by, rather than race the standby for the key.
            defer_s = self._settings.lease_ttl_s if leadership.deposed else 0.0

    async def _await_membership(self) -> RegionConfig:
        """Returns the region config once it lists this shard: a replica of a shard an admin
        has not added yet (POST /admin/shards) waits instead of leading a shard nobody maps
        to."""
        waited = False
        while True:
            try:
                kv = await self._store.get(keys.region_config())
                config = None if kv is None else from_json(RegionConfig, kv.value, stored=True)
            except (StoreError, ValidationError) as error:
                _log.warning("shard %s: reading the region config failed: %s", self.shard, error)
                config = None
            if config is not None and self.shard in config.shards:
                if waited:
                    _log.info("shard %s: added to the region; campaigning", self.shard)
                return config
            self.membership_checks += 1
            if not waited:
                _log.warning(
                    "shard %s is not in the region config; waiting until an admin adds it "
                    "(POST /admin/shards or `tether shard add %s`)",
                    self.shard,
                    self.shard,
                )
                waited = True
            await asyncio.sleep(self._settings.region_poll_s)


class Term:
    """One term as the shard's leader: mirrors, a queue of jobs to reconcile, timers."""

    def __init__(
        self,
        store: Store,
        shard: str,
        settings: SchedulerSettings,
        leadership: Leadership,
        leading: asyncio.Event,
        region: RegionConfig,
        reconciled: dict[str, int],
    ) -> None:
        self._settings = settings
        self._reconciled = reconciled
        self._leadership = leadership
        self._leading = leading
        # Job handle -> the tasks to reconcile (their records or statuses changed), or None:
        # the whole job.
        self._dirty: dict[str, set[int] | None] = {}
        self._wake = asyncio.Event()
        self._store = store
        self._shard = shard
        self._state = ShardState(
            store,
            shard,
            self._mark,
            fencing_s=region.fencing_s,
            reshaped=self._reshaped,
            holding_changed=self._holding_changed,
        )
        self._allocator = AllocatorClient(store, settings.allocator_timeout_s, settings.tls)
        self.decider = Decider(
            store,
            self._state,
            leadership.fence,
            leadership.identity,
            region.non_preemptible_priority,
            self._allocator,
            lease=leadership.lease,
        )
        self._executor = Executor(store, leadership.fence, self._allocator, self._state.owned_at)
        self._reconciles = 0
        self._last_reconcile_at: datetime | None = None
        self._reported: ShardStatus | None = None
        """The status last written in this term."""
        # Job handle -> monotonic time before which its unplaced tasks are not offered again.
        self._place_after: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._controllers = ControllerClient(settings.control_timeout_s, settings.tls)
        # Job handle -> its approval step under way, apart from reconciles: a slow controller
        # must not hold up restarts and replacements of the job's tasks.
        self._controlling: dict[str, asyncio.Task[None]] = {}

    async def run(self) -> None:
        """Reconciles the shard's jobs until leadership is lost."""
        try:
            await self._allocator.start()
            await self._state.start()  # marks every job it loads as dirty
            self._leading.set()
            await first_of(
                self._leadership.lost.wait(),
                self._work(),
                self._decide(),
                every(self._settings.resync_s, self._resync),  # between sweeps
                every(self._settings.status_interval_s, self._report, now=True),
            )
        finally:
            self._leading.clear()
            for timer in self._timers.values():
                timer.cancel()
            await cancel_and_wait(*self._controlling.values())
            await self._state.stop()
            await self._allocator.stop()
            await self._controllers.close()

    def _mark(self, handle: str, task: int | None = None) -> None:
        """Has the job reconciled: only task `task`, or the whole job (None)."""
        if task is None:
            self._dirty[handle] = None
        elif (tasks := self._dirty.setdefault(handle, set())) is not None:
            tasks.add(task)
        self._wake.set()

    def _reshaped(self) -> None:
        self.decider.reshaped()

    def _holding_changed(self, handle: str) -> None:
        self.decider.touch(handle)

    async def _decide(self) -> None:
        """Runs the trees' decider; a failed pass is logged and the next one starts afresh."""
        while True:
            try:
                await self.decider.run()
            except NotLeader as error:
                _log.warning("admission: deposed: %s", error)
                self._leadership.lost.set()
                return
            except Exception:
                _log.exception("admission: a pass failed; deciding again shortly")
                self.decider.reshaped()
                await asyncio.sleep(_RETRY_S)

    def _later(self, handle: str, delay_s: float) -> None:
        """Reconciles the job again in `delay_s` (or earlier, if already due earlier)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(delay_s, 0.0)
        timer = self._timers.get(handle)
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._timers[handle] = loop.call_at(when, self._fire, handle)

    def _fire(self, handle: str) -> None:
        del self._timers[handle]
        self._mark(handle)

    async def _resync(self) -> None:
        """Reconciles every job, a safety net for missed changes, at most `resync_tasks_per_s`
        tasks a second. Marking a whole shard at once every `resync_s` cost a leader work in
        proportion to its shard: at a million tasks, half of each leader's CPU went to planning
        jobs nothing had changed, and the tasks started ever slower."""
        for handle, count in list(self._state.sized_handles()):
            self._mark(handle)
            await asyncio.sleep(count / self._settings.resync_tasks_per_s)

    async def _report(self) -> None:
        """Writes the term's ShardStatus (looked at every `status_interval_s`, written when it
        changed), on the leader's lease and fenced by the leader key, for operators (GET
        /admin/shards). An idle shard writes nothing: each write wakes every watcher."""
        status = ShardStatus(
            shard=self._shard,
            identity=self._leadership.identity,
            jobs=sum(1 for _ in self._state.handles()),
            backlog=len(self._dirty),
            reconciles=self._reconciles,
            last_reconcile_at=self._last_reconcile_at,
            updated_at=datetime.now(UTC),
        )
        if self._reported is not None and same_but_updated_at(self._reported, status):
            return
        put = Put(keys.shard_status(self._shard), to_json(status), self._leadership.lease)
        try:
            await self._store.txn([self._leadership.fence.compare()], [put])
        except StoreError as error:
            _log.info("shard %s: reporting status failed: %s", self._shard, error)
        else:
            self._reported = status

    async def _work(self) -> None:
        """Reconciles dirty jobs, a few at a time and each job by one worker at a time."""
        running: set[str] = set()
        async with asyncio.TaskGroup() as group:
            while True:
                await self._wake.wait()
                self._wake.clear()
                for handle in list(self._dirty):
                    if len(running) >= self._settings.concurrency:
                        break
                    if handle in running:
                        continue
                    tasks = self._dirty.pop(handle)
                    running.add(handle)
                    group.create_task(self._reconcile_guarded(handle, tasks, running))

    async def _reconcile_guarded(
        self, handle: str, tasks: set[int] | None, running: set[str]
    ) -> None:
        try:
            with metrics.SCHEDULER_RECONCILE_SECONDS.time():
                await self._reconcile(handle, tasks)
            self._reconciles += 1
            self._last_reconcile_at = datetime.now(UTC)
        except NotLeader as error:
            _log.warning("%s: deposed: %s", handle, error)
            self._leadership.lost.set()
        except NotOwner as error:
            # The shard-map mirror shows the move soon, and then the job is not ours to view.
            _log.info("%s: left alone: %s", handle, error)
        except (AllocatorError, StoreError) as error:
            _log.warning("%s: reconcile failed, retrying: %s", handle, error)
            self._later(handle, self._settings.place_retry_s)
        except Exception:
            # A bug met by one job must not stop the others.
            _log.exception("%s: reconcile failed; retrying later", handle)
            self._later(handle, self._settings.place_retry_s)
        finally:
            running.discard(handle)
            self._wake.set()

    async def _reconcile(self, handle: str, tasks: set[int] | None) -> None:
        """Plans the job (only `tasks`, unless None) and carries out the plan."""
        view = self._state.view(handle)
        if view is None:
            self._place_after.pop(handle, None)
            self._reconciled.pop(handle, None)
            return
        now = datetime.now(UTC)
        plan = plan_job(view, now, tasks)
        place_after = self._place_after.get(handle, 0.0)
        may_place = time.monotonic() >= place_after
        outcome = await self._executor.execute(view, plan, may_place=may_place)
        if outcome.unplaced:
            if may_place:
                place_after = time.monotonic() + self._settings.place_retry_s
                self._place_after[handle] = place_after
            self._later(handle, place_after - time.monotonic())
        else:
            self._place_after.pop(handle, None)
        if plan.wake_at is not None:
            self._later(handle, (plan.wake_at - now).total_seconds())
        if view.operations and not plan.delete_job:
            self._start_control(handle)
        await self._catch_up(handle, outcome)
        self._reconciled[handle] = view.revision

    def _start_control(self, handle: str) -> None:
        under_way = self._controlling.get(handle)
        if under_way is not None and not under_way.done():
            # It asks again later if operations are still waiting then.
            return
        self._controlling[handle] = asyncio.create_task(
            self._control_guarded(handle), name=f"taskcontrol {handle}"
        )

    async def _control_guarded(self, handle: str) -> None:
        try:
            await self._control(handle)
        except NotLeader as error:
            _log.warning("%s: deposed: %s", handle, error)
            self._leadership.lost.set()
        except NotOwner as error:
            _log.info("%s: left alone: %s", handle, error)
        except StoreError as error:
            _log.warning("%s: approving operations failed, retrying: %s", handle, error)
            self._later(handle, self._settings.control_interval_s)
        except Exception:
            _log.exception("%s: approving operations failed; retrying later", handle)
            self._later(handle, self._settings.control_interval_s)

    async def _control(self, handle: str) -> None:
        """Asks the job's controller (or the built-in rule) which pending operations may
        proceed, and marks them approved; reports and forgets completed ones."""
        view = await self._state.consistent_view(handle)
        if view is None:
            return
        now = datetime.now(UTC)
        pending = Pending.of(view)
        if not pending.waiting and not pending.completed:
            return
        registration = self._state.controller_for(handle)
        if registration is None:
            acks = default_acks(view, pending)
        else:
            sequence = await self._executor.next_sequence(handle)
            try:
                acks = await self._controllers.process(
                    registration, control_request(view, pending, sequence, now)
                )
            except ControllerFailed as error:
                metrics.SCHEDULER_TASKCONTROL_CALLS.labels(metrics.call_outcome(error)).inc()
                failures = await self._executor.control_outcome(
                    handle, registration.endpoint, str(error)
                )
                _log.warning("%s: %s (failure %d in a row)", handle, error, failures)
                interval = self._settings.control_interval_s
                self._later(
                    handle, min(interval * 2**failures, self._settings.control_backoff_max_s)
                )
                return
            metrics.SCHEDULER_TASKCONTROL_CALLS.labels("ok").inc()
            await self._executor.control_outcome(handle, registration.endpoint, "")
        waiting = {stored.value.id: stored for stored in pending.waiting}
        approved = [
            OperationWrite(
                waiting[ack].value.model_copy(
                    update={"state": OperationState.APPROVED, "updated_at": now}
                ),
                waiting[ack].revision,
            )
            for ack in acks
        ]
        reported = [(stored.value.id, stored.revision) for stored in pending.completed]
        await self._executor.approve(handle, approved, reported)
        if len(approved) < len(waiting):
            self._later(handle, self._settings.control_interval_s)

    async def _catch_up(self, handle: str, outcome: Outcome) -> None:
        state = self._state
        entitlement, _ = parse_job_handle(handle)
        waits: list[Coroutine[Any, Any, None]] = []
        if revision := outcome.tasks_revision:
            # A transaction that deleted only a status (of a task gone already) shows in the
            # statuses alone, and a quiet entitlement's tasks would not move past it.
            async def tasks_or_statuses() -> None:
                # Its waits are made here, not by the caller: a gather cancelled before this
                # starts would leave them never awaited.
                await first_of(
                    state.tasks.wait_for(entitlement, revision),
                    state.statuses.wait_for(entitlement, revision),
                )

            waits.append(tasks_or_statuses())
        if outcome.job_revision:
            waits.append(state.jobs.mirror.wait_for(outcome.job_revision))
        if outcome.operations_revision:
            waits.append(state.operations.mirror.wait_for(outcome.operations_revision))
        if not waits:
            return
        try:
            async with asyncio.timeout(_CATCH_UP_S):
                await asyncio.gather(*waits)
        except TimeoutError:
            _log.warning("mirrors did not catch up with our writes in %ss", _CATCH_UP_S)
