"""/admin/shards: scheduler shards, and an admin's actions on them."""

from __future__ import annotations

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import AUTH_PROBLEMS, problems, request_body
from tether.frontend.auth import CurrentPrincipal, require_admin
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, ShardCountsDep, StoreDep
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.shards import (
    DrainView,
    FailoverView,
    MoveView,
    NewShard,
    ReplicaView,
    ShardDetail,
    ShardList,
    ShardMoveRequest,
)
from tether.frontend.shards import (
    Move,
    ShardLoad,
    add_shard,
    drain,
    failover,
    lease_expiry,
    move_entitlement,
    shard_loads,
    stranded,
)
from tether.model import Name, ShardReplica
from tether.store import Store

router = APIRouter(prefix="/admin/shards", tags=["admin"], responses=AUTH_PROBLEMS)

ShardId = Path(description="The shard's id, e.g. shard-0.")


@router.get("", response_model=ShardList)
async def list_shards(
    store: ReadsDep, counts: ShardCountsDep, principal: CurrentPrincipal
) -> Response:
    """Admin: every scheduler shard with its leader, standbys, lease expiry and last
    reconcile, and what it holds: entitlements, jobs, tasks, the machines its entitlements own
    and its jobs' task operations (as this frontend's watches count them: 503 while it is
    still listing them after its start)."""
    require_admin(principal)
    config = await records.region_config(store)
    details = [await _detail(store, load) for load in await shard_loads(store, config, counts)]
    return ShardList(shards=details).response()


@router.post(
    "",
    status_code=201,
    response_model=ShardDetail,
    responses=problems(400, 409, 413, 422),
    openapi_extra=request_body(NewShard, 'The shard: {"id": "shard-2"}.'),
)
async def create_shard(
    request: Request,
    store: StoreDep,
    counts: ShardCountsDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
) -> Response:
    """Admin: add a shard to the region. Replicas started for it (`tether scheduler --shard
    ID`) wait until then, and elect a leader once it is added; new entitlements join it while
    it is the least loaded. Naming a draining shard stops its draining."""
    require_admin(principal)
    body = await read_body(request, settings.max_body_bytes)
    shard = parse_model(NewShard, body, request.headers.get("content-type")).id
    config = await add_shard(store, shard)
    load = next(load for load in await shard_loads(store, config, counts) if load.shard == shard)
    return (await _detail(store, load)).response(201, {"Location": "/admin/shards"})


@router.post(
    "/{shard}/move",
    response_model=MoveView,
    responses=problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(
        ShardMoveRequest, 'The entitlement and, optionally, where: {"entitlement": "ads"}.'
    ),
)
async def move(
    request: Request,
    store: StoreDep,
    counts: ShardCountsDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    shard: Name = ShardId,
) -> Response:
    """Admin: move an entitlement to another shard. The old leader stops deciding for its
    jobs at once (its writes are fenced by the shard-map revision), the new leader takes them
    over from the store; no task restarts."""
    require_admin(principal)
    body = await read_body(request, settings.max_body_bytes)
    wanted = parse_model(ShardMoveRequest, body, request.headers.get("content-type"))
    config = await records.region_config(store)
    moved = await move_entitlement(store, counts, config, shard, wanted.entitlement, wanted.to)
    return _move_view(moved).response()


@router.post(
    "/{shard}/failover", status_code=202, response_model=FailoverView, responses=problems(404, 409)
)
async def fail_over(
    store: StoreDep, principal: CurrentPrincipal, shard: Name = ShardId
) -> Response:
    """Admin: hand the shard's leadership to a standby now. 409 when it has no leader or no
    standby. The answer comes as the leader key is deleted; a standby holds it within
    moments (GET /admin/shards shows which)."""
    require_admin(principal)
    config = await records.region_config(store)
    previous = await failover(store, config, shard)
    assert previous.leader is not None
    view = FailoverView(
        shard=shard,
        previous_leader=previous.leader.identity,
        standbys=[_replica_view(replica) for replica in previous.standbys],
    )
    return view.response(202)


@router.post("/{shard}/drain", response_model=DrainView, responses=problems(404, 409))
async def drain_shard(
    store: StoreDep, counts: ShardCountsDep, principal: CurrentPrincipal, shard: Name = ShardId
) -> Response:
    """Admin: move every entitlement of the shard to the least-loaded other shards and take
    no new ones (POST /admin/shards with its id undoes the latter). Tasks keep running."""
    require_admin(principal)
    moves = await drain(store, counts, shard)
    return DrainView(shard=shard, moves=[_move_view(moved) for moved in moves]).response()


async def _detail(store: Store, load: ShardLoad) -> ShardDetail:
    leader, status = load.leader, load.status
    return ShardDetail(
        shard=load.shard,
        draining=load.draining,
        leader=leader.identity if leader else None,
        leader_pid=leader.pid if leader else None,
        leader_since=leader.since if leader else None,
        lease_expires_at=await lease_expiry(store, load),
        standbys=[_replica_view(replica) for replica in load.standbys],
        last_reconcile_at=status.last_reconcile_at if status else None,
        reconciles=status.reconciles if status else None,
        backlog=status.backlog if status else None,
        reported_at=status.updated_at if status else None,
        entitlements=sorted(load.entitlements),
        jobs=load.jobs,
        tasks=load.tasks,
        machines=load.machines,
        operations=load.operations,
        warning=stranded(load),
    )


def _replica_view(replica: ShardReplica) -> ReplicaView:
    return ReplicaView(identity=replica.identity, pid=replica.pid, since=replica.since)


def _move_view(moved: Move) -> MoveView:
    return MoveView(
        entitlement=moved.entitlement,
        from_shard=moved.source,
        to_shard=moved.target,
        revision=moved.revision,
    )
