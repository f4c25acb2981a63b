"""Rebalancer runs: asking the rebalancer's leader for one, and reading what it did."""

from __future__ import annotations

import uuid
from datetime import datetime

from tether.frontend import records
from tether.frontend.problems import Conflict, NotFound
from tether.frontend.schemas.rebalance import RebalanceRequest
from tether.model import PrincipalRecord, to_json
from tether.model.rebalance import RebalanceRun
from tether.store import Put, Store, key_missing, keys


async def ask(
    store: Store, wanted: RebalanceRequest, principal: PrincipalRecord, now: datetime
) -> RebalanceRun:
    """A pending run for the rebalancer's leader; 409 while no rebalancer leads (nobody would
    carry it out)."""
    if await store.get(keys.rebalancer_leader()) is None:
        raise Conflict("no rebalancer is running: start one (`tether rebalancer`) and ask again")
    run = RebalanceRun(
        id=str(uuid.uuid4()),
        dry_run=wanted.dry_run,
        strategies=list(dict.fromkeys(wanted.strategies)),
        requested_by=principal.name,
        created_at=now,
        updated_at=now,
    )
    key = keys.rebalance_run(run.id)
    await store.txn([key_missing(key)], [Put(key, to_json(run))])
    return run


async def run_of(store: Store, run_id: str) -> RebalanceRun:
    kv = await store.get(keys.rebalance_run(run_id))
    if kv is None:
        raise NotFound(f"no rebalancer run {run_id}")
    return records.load(RebalanceRun, kv)


async def runs(store: Store) -> list[RebalanceRun]:
    """Every run kept, newest first."""
    found = await records.scan(store, keys.rebalance_runs(), RebalanceRun)
    return sorted(found, key=lambda run: (run.created_at, run.id), reverse=True)
