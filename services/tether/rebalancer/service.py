"""The rebalancer service: its replicas elect a leader, which carries out the runs asked for
(`rebalancer/runs/`, written pending by the frontend) and, in continuous mode, a round every
period; the others stand by."""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime

from pydantic import ValidationError

from tether import metrics
from tether.aio import cancel_and_wait, every, first_of
from tether.allocator_calls import AllocatorReplicas, AllocatorUnavailable
from tether.model import from_json
from tether.model.rebalance import RebalanceRun, RunState
from tether.rebalancer.proposals import put_run
from tether.rebalancer.rounds import run_round
from tether.rebalancer.settings import RebalancerSettings
from tether.service import Service
from tether.store import Delete, Store, StoreError, keys, mod_revision_is
from tether.store.election import Election, ElectionKeys, Fence, Leadership
from tether.store.mirror import PrefixMirror

_log = logging.getLogger(__name__)

_RETRY_S = 1.0
_IDLE_S = 3600.0
"""Without continuous rounds, the leader waits for runs: a new one wakes it at once."""
CONTINUOUS = "continuous"
"""`requested_by` of the continuous rounds' runs."""
ELECTION = ElectionKeys("rebalancer", keys.rebalancer_leader(), keys.rebalancer_replicas())


class Rebalancer(Service):
    """One rebalancer replica. It owns `store` and closes it on `stop()`."""

    def __init__(
        self,
        store: Store,
        settings: RebalancerSettings | None = None,
        *,
        identity: str | None = None,
    ) -> None:
        self.settings = settings or RebalancerSettings()
        self.name = "rebalancer"
        self._store = store
        self.election = Election(
            store,
            ELECTION,
            self.settings.lease_ttl_s,
            identity,
            liveness_host=self.settings.liveness_host,
        )
        self._allocators = AllocatorReplicas(
            store, self.settings.allocator_timeout_s, self.settings.tls
        )
        self._wake = asyncio.Event()
        self._runs = PrefixMirror(store, keys.rebalance_runs(), self._runs_changed)
        self.leading = asyncio.Event()
        """Set while this replica leads."""
        self.rounds = 0
        """Rounds carried out (done or failed) in any term: tests wait for one."""
        self._next_continuous = 0.0
        self._main: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._runs.start()
        self._main = asyncio.create_task(self._serve(), name=self.name)

    async def stop(self) -> None:
        await cancel_and_wait(self._main)
        self._main = None
        await self.election.close()
        await self._runs.stop()
        await self._allocators.close()
        await self._store.close()

    async def _serve(self) -> None:
        defer_s = 0.0
        while True:
            leadership = await self.election.campaign(defer_s=defer_s)
            self.leading.set()
            try:
                await first_of(leadership.lost.wait(), self._lead(leadership))
            except Exception:
                _log.exception("rebalancer: leading failed; standing by again")
                await asyncio.sleep(_RETRY_S)
            finally:
                self.leading.clear()
                await self.election.resign()
            _log.warning("rebalancer: no longer leading")
            defer_s = self.settings.lease_ttl_s if leadership.deposed else 0.0

    async def _lead(self, leadership: Leadership) -> None:
        self._next_continuous = asyncio.get_running_loop().time()
        await every(
            self._pause, lambda: self._serve_runs(leadership.fence), wake=self._wake, now=True
        )

    def _pause(self) -> float:
        if not self.settings.continuous:
            return _IDLE_S
        return max(0.0, self._next_continuous - asyncio.get_running_loop().time())

    async def _runs_changed(self, changed: set[str]) -> None:
        self._wake.set()

    async def _serve_runs(self, fence: Fence) -> None:
        """The runs waiting, oldest first; then a continuous round if one is due."""
        try:
            for run, revision in self._pending():
                await self._carry_out(fence, run, revision)
            loop = asyncio.get_running_loop()
            if self.settings.continuous and loop.time() >= self._next_continuous:
                self._next_continuous = loop.time() + self.settings.period_s
                now = datetime.now(UTC)
                run = RebalanceRun(
                    id=str(uuid.uuid4()),
                    dry_run=False,
                    requested_by=CONTINUOUS,
                    created_at=now,
                    updated_at=now,
                )
                await self._carry_out(fence, run, 0)
            await self._prune(fence)
        except StoreError as error:
            _log.warning("rebalancer: serving runs failed, retrying: %s", error)
            self._wake.set()
            await asyncio.sleep(_RETRY_S)

    def _runs_kept(self) -> list[tuple[RebalanceRun, int]]:
        """Every run in the store (as mirrored) with its mod revision."""
        kept = []
        for kv in list(self._runs.items.values()):
            try:
                kept.append((from_json(RebalanceRun, kv.value, stored=True), kv.mod_revision))
            except ValidationError as error:
                _log.warning("rebalancer: skipping %s: %s", kv.key, error)
        return kept

    def _pending(self) -> list[tuple[RebalanceRun, int]]:
        pending = [
            (run, revision) for run, revision in self._runs_kept() if run.state is RunState.PENDING
        ]
        return sorted(pending, key=lambda found: (found[0].created_at, found[0].id))

    async def _carry_out(self, fence: Fence, run: RebalanceRun, revision: int) -> None:
        try:
            earlier = [found for found, _ in self._runs_kept() if found.id != run.id]
            done = await run_round(
                self._store, self._allocators, fence, self.settings, run, earlier
            )
            outcome = "done"
        except StoreError:
            raise  # retried: the store may be back in a moment
        except Exception as error:
            if not isinstance(error, AllocatorUnavailable):
                _log.exception("rebalancer: run %s failed", run.id)
            done = run.model_copy(
                update={
                    "state": RunState.FAILED,
                    "message": str(error),
                    "updated_at": datetime.now(UTC),
                }
            )
            outcome = "failed"
        metrics.REBALANCER_ROUNDS.labels(outcome).inc()
        self.rounds += 1
        moved = sum(1 for move in done.moves if move.operation is not None)
        _log.info(
            "rebalancer: run %s (%s) %s: %d moves%s",
            run.id,
            run.requested_by,
            done.state,
            len(done.moves),
            "" if run.dry_run else f", {moved} proposed",
        )
        await put_run(self._store, fence, done, revision)

    async def _prune(self, fence: Fence) -> None:
        """Deletes all but the newest `runs_kept` runs that are over."""
        over = sorted(
            (
                (run.created_at, keys.rebalance_run(run.id), revision)
                for run, revision in self._runs_kept()
                if run.state is not RunState.PENDING
            ),
            reverse=True,
        )
        for _, key, revision in over[self.settings.runs_kept :]:
            await self._store.txn([fence.compare(), mod_revision_is(key, revision)], [Delete(key)])
