"""The rebalancer's writes: MOVE operations for a round's moves (fenced by its leader key, each
only if its task is as read), withdrawing its own moves nobody approved in time, and runs."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta

from tether.model import OperationKind, OperationState, TaskOperation, parse_job_handle, to_json
from tether.model.rebalance import RebalanceMove, RebalanceRun
from tether.rebalancer.planner import PlannedMove
from tether.rebalancer.reading import MOVE_PREFIX, OwnMove, RegionRead
from tether.store import Delete, Put, Store, key_missing, keys, mod_revision_is
from tether.store.election import Fence

RATE_WINDOW = timedelta(minutes=1)


def move_id(move: PlannedMove) -> str:
    """The id of the move of a task's attempt to a machine: proposed once, however often a
    round plans it."""
    digest = hashlib.sha256(f"{move.job}/{move.attempt}/{move.target}".encode()).hexdigest()
    return f"{MOVE_PREFIX}{digest[:12]}-t{move.index}"


def move_operation(move: PlannedMove, now: datetime) -> TaskOperation:
    """The MOVE operation of a planned move: a target, no deadline (only the job's controller,
    or the built-in rule, approves it)."""
    return TaskOperation(
        id=move_id(move),
        kind=OperationKind.MOVE,
        job=move.job,
        tasks=[move.index],
        reason=f"rebalance ({move.strategy}): {move.why}",
        created_at=now,
        updated_at=now,
        attempt=move.attempt,
        target_machine=move.target,
    )


async def propose(
    store: Store, fence: Fence, moves: Sequence[PlannedMove], read: RegionRead, now: datetime
) -> list[RebalanceMove]:
    """Writes each move's operation while this leader holds the key and the task's record and
    status are as read (a task that went down meanwhile is not moved); returns every move, with
    the id of its operation where it was written."""
    proposed = []
    for move in moves:
        entitlement, name = parse_job_handle(move.job)
        operation = move_operation(move, now)
        key = keys.operation(entitlement, name, operation.id)
        task_revision, status_revision = read.task_revisions[f"{move.job}/{move.index}"]
        status_key = keys.task_status(entitlement, name, move.index)
        result = await store.txn(
            [
                fence.compare(),
                key_missing(key),
                mod_revision_is(keys.task(entitlement, name, move.index), task_revision),
                mod_revision_is(status_key, status_revision)
                if status_revision
                else key_missing(status_key),
            ],
            [Put(key, to_json(operation))],
        )
        proposed.append(record(move, operation.id if result.succeeded else None))
    return proposed


def record(move: PlannedMove, operation: str | None) -> RebalanceMove:
    return RebalanceMove(
        job=move.job,
        index=move.index,
        source=move.source,
        target=move.target,
        strategy=move.strategy,
        why=move.why,
        operation=operation,
    )


def proposed_lately(runs: Sequence[RebalanceRun], now: datetime) -> int:
    """The moves the runs proposed within the last minute (their operations may be done and
    deleted since: they count all the same)."""
    return sum(
        sum(1 for move in run.moves if move.operation is not None)
        for run in runs
        if not run.dry_run and now - run.updated_at < RATE_WINDOW
    )


async def withdraw_stale(
    store: Store, fence: Fence, own: Sequence[OwnMove], now: datetime, timeout_s: float
) -> int:
    """Deletes the rebalancer's moves still waiting for approval after `timeout_s`: what they
    would gain was decided on a region that has moved on. Returns how many went."""
    withdrawn = 0
    for move in own:
        operation = move.operation
        waiting = operation.state is OperationState.PENDING_APPROVAL
        if waiting and (now - operation.created_at).total_seconds() >= timeout_s:
            result = await store.txn(
                [fence.compare(), mod_revision_is(move.key, move.revision)], [Delete(move.key)]
            )
            withdrawn += result.succeeded
    return withdrawn


async def put_run(store: Store, fence: Fence, run: RebalanceRun, revision: int) -> bool:
    """Writes the run while this leader holds the key and the run's record is at `revision`
    (0: a new one); whether it was written."""
    key = keys.rebalance_run(run.id)
    compare = key_missing(key) if revision == 0 else mod_revision_is(key, revision)
    result = await store.txn([fence.compare(), compare], [Put(key, to_json(run))])
    return result.succeeded
