"""One round of the rebalancer: read the region, let each strategy propose, ask the allocator
where the tasks would go, plan (`planner.plan_round`), and propose the moves."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from tether import metrics
from tether.allocator_calls import AllocatorRefused, AllocatorReplicas
from tether.model.rebalance import STRATEGY_NAMES, RebalanceRun, RunState
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.rebalancer.planner import Limits, plan_round
from tether.rebalancer.proposals import propose, proposed_lately, record, withdraw_stale
from tether.rebalancer.reading import read_region
from tether.rebalancer.settings import RebalancerSettings
from tether.rebalancer.strategies.base import Candidate, by_job
from tether.rebalancer.strategies.registry import STRATEGIES
from tether.store import Store
from tether.store.election import Fence

if TYPE_CHECKING:
    from tether.proto.allocator.v1.allocator_pb2_grpc import AllocatorAsyncStub

_log = logging.getLogger(__name__)


async def run_round(
    store: Store,
    allocators: AllocatorReplicas,
    fence: Fence,
    settings: RebalancerSettings,
    run: RebalanceRun,
    earlier: Sequence[RebalanceRun],
) -> RebalanceRun:
    """Carries out `run` (pending) and returns it done; `earlier` runs' moves of the last minute
    count against the limit. Raises what reading the store or asking the allocators raises;
    the caller records the run failed."""
    now = datetime.now(UTC)
    read = await read_region(store, now)
    view = read.view
    if not run.dry_run:
        withdrawn = await withdraw_stale(store, fence, read.own_moves, now, settings.move_timeout_s)
        metrics.REBALANCER_WITHDRAWN.inc(withdrawn)
    # In the registry's order whatever order they were named in: it is their priority.
    names = sorted(set(run.strategies or settings.strategies), key=STRATEGY_NAMES.index)
    strategies = [STRATEGIES[name](view) for name in names]
    candidates = [(s, c) for s in strategies for c in s.candidates(view)]
    suggestions = {
        strategy.name: await suggest(allocators, [c for s, c in candidates if s is strategy])
        for strategy in strategies
    }
    limits = Limits(settings.max_moves_per_job, settings.max_moves_per_minute)
    plan = plan_round(
        view,
        strategies,
        candidates,
        suggestions,
        limits,
        proposed_lately=proposed_lately(earlier, now),
    )
    if run.dry_run:
        moves = [record(move, None) for move in plan.moves]
    else:
        moves = await propose(store, fence, plan.moves, read, now)
        for move in moves:
            if move.operation is not None:
                metrics.REBALANCER_MOVES.labels(move.strategy).inc()
    for name, measure in plan.before.items():
        metrics.REBALANCER_MEASURE.labels(name).set(measure)
        metrics.REBALANCER_GAIN.labels(name).set(plan.gains[name])
    for reason, count in plan.deferred.items():
        metrics.REBALANCER_DEFERRED.labels(reason).inc(count)
    return run.model_copy(
        update={
            "state": RunState.DONE,
            "updated_at": datetime.now(UTC),
            "moves": moves,
            "before": plan.before,
            "after": plan.after,
            "deferred": plan.deferred,
        }
    )


async def suggest(allocators: AllocatorReplicas, candidates: Sequence[Candidate]) -> dict[str, str]:
    """Task id -> the machine the allocator would put it on now, for every task of one
    strategy's candidates: one Suggest per job, its tasks planned together, as the strategy
    would move them (another strategy's, planned with them, would take their room). A task it
    would put nowhere is missing, and so is a job it refuses (gone meanwhile, say); no allocator
    answering fails the round."""
    found: dict[str, str] = {}
    for job, indexes in by_job(candidates).items():
        request = pb.SuggestRequest(job_handle=job, task_indexes=indexes)
        try:
            answer = await allocators.call("Suggest", _suggest_call(request, allocators.timeout_s))
        except AllocatorRefused as refused:
            _log.info("no suggestion for %s: %s", job, refused)
            continue
        for placement in answer.placements:
            found[f"{job}/{placement.task_index}"] = placement.machine_id
    return found


def _suggest_call(
    request: pb.SuggestRequest, timeout_s: float
) -> Callable[[AllocatorAsyncStub], Awaitable[pb.SuggestResponse]]:
    def call(stub: AllocatorAsyncStub) -> Awaitable[pb.SuggestResponse]:
        return stub.Suggest(request, timeout=timeout_s)

    return call
