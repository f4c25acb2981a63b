"""/v1/entitlements: list, create, replace and delete (admin) and inspect entitlements."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from tether.frontend import entitlements, records
from tether.frontend.admission import check_tree
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, problems, request_body
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement, can_see, require_admin
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, ShardCountsDep, StoreDep
from tether.frontend.problems import Conflict
from tether.frontend.quota import total_demand
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas import json_response
from tether.frontend.schemas.entitlements import EntitlementList, EntitlementView
from tether.frontend.shards import least_loaded, shard_loads
from tether.model import ZERO, Entitlement, Job, to_json
from tether.model.quota_tree import QuotaTree
from tether.store import Put, Store, key_missing, keys, mod_revision_is

router = APIRouter(prefix="/v1/entitlements", tags=["entitlements"], responses=AUTH_PROBLEMS)


async def _view(store: Store, entitlement: Entitlement) -> EntitlementView:
    shard = await store.get(keys.shard_assignment(entitlement.name))
    jobs = await records.scan(store, keys.jobs_of(entitlement.name), Job)
    allocated = sum(
        (
            resources
            for machine in (await records.allocations(store)).values()
            for task_id, resources in machine.tasks.items()
            if task_id.split("/", 1)[0] == entitlement.name
        ),
        ZERO,
    )
    return EntitlementView(
        entitlement=entitlement,
        shard=shard.value.decode() if shard else None,
        requested=total_demand(job.spec for job in jobs if not job.deleting),
        allocated=allocated,
    )


@router.get("", response_model=EntitlementList)
async def list_entitlements(store: ReadsDep, principal: CurrentPrincipal) -> Response:
    """The entitlements the principal belongs to (all of them for admins)."""
    entitlements = await records.scan(store, keys.ENTITLEMENTS, Entitlement)
    visible = [ent for ent in entitlements if can_see(principal, ent)]
    return EntitlementList(entitlements=visible).response()


@router.post(
    "",
    status_code=201,
    response_model=EntitlementView,
    responses=problems(400, 409, 413, 422),
    openapi_extra=request_body(Entitlement, "The entitlement to create."),
)
async def create_entitlement(
    request: Request,
    store: StoreDep,
    counts: ShardCountsDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
) -> Response:
    """Admin: create an entitlement; a root goes to the least-loaded scheduler shard (fewest
    machines owned, then fewest tasks, then fewest entitlements), a child to its tree's. 422
    when its parent is unknown, or the quotas of its family would not fit its parent's."""
    require_admin(principal)
    body = await read_body(request, settings.max_body_bytes)
    entitlement = parse_model(Entitlement, body, request.headers.get("content-type"))
    region = await records.region_config(store)
    key = keys.entitlement(entitlement.name)
    existing = await records.scan(store, keys.ENTITLEMENTS, Entitlement)
    if any(other.name == entitlement.name for other in existing):
        raise Conflict(f"entitlement '{entitlement.name}' already exists")
    check_tree(existing, entitlement)
    compares = [key_missing(key)]
    if entitlement.parent is None:
        shard = least_loaded(await shard_loads(store, region, counts))
    else:
        # A tree's decider is the leader of its root's shard: its members live there too.
        parent = keys.entitlement(entitlement.parent)
        stored_parent = await store.get(parent)
        root = QuotaTree(existing).root_of(entitlement.parent)
        mapped = await store.get(keys.shard_assignment(root))
        if stored_parent is None or mapped is None:
            raise Conflict(f"entitlement '{entitlement.parent}' changed meanwhile; try again")
        shard = mapped.value.decode()
        # The parent must still be what the tree was checked against.
        compares.append(mod_revision_is(parent, stored_parent.mod_revision))
        compares.append(key_missing(keys.entitlement_deletion(entitlement.parent)))
    created = await store.txn(
        compares,
        [
            Put(key, to_json(entitlement)),
            Put(keys.shard_assignment(entitlement.name), shard.encode()),
        ],
    )
    if not created.succeeded:
        raise Conflict(
            f"entitlement '{entitlement.name}' or its parent changed meanwhile; try again"
        )
    # The next entitlement created through this frontend must count this one on its shard.
    await counts.wait_for(keys.SHARD_MAP, created.revision)
    # Nothing can request or hold anything yet: jobs need the entitlement to exist first.
    view = EntitlementView(entitlement=entitlement, shard=shard, requested=ZERO, allocated=ZERO)
    return view.response(201, {"Location": f"/v1/entitlements/{entitlement.name}"})


@router.get("/{name}", response_model=EntitlementView, responses=problems(404))
async def get_entitlement(
    store: ReadsDep, principal: CurrentPrincipal, name: EntitlementName
) -> Response:
    """The entitlement, its shard, what its jobs request and what its tasks hold."""
    entitlement = await authorize_entitlement(store, principal, name)
    return (await _view(store, entitlement.model)).response()


@router.put(
    "/{name}",
    response_model=Entitlement,
    responses=problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(Entitlement, "The entitlement's new record (the same name)."),
)
async def replace_entitlement(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    name: EntitlementName,
) -> Response:
    """Admin: replace an entitlement (its quota, limits, parent, weight, members...); its
    shard stays. 422 naming the field when the tree would not hold: a cycle of parents,
    children guaranteed more than its quota, its family more than its parent's."""
    require_admin(principal)
    body = await read_body(request, settings.max_body_bytes)
    candidate = parse_model(Entitlement, body, request.headers.get("content-type"))
    replaced = await entitlements.replace(store, name, candidate)
    return json_response(replaced)


@router.delete("/{name}", response_model=Entitlement, responses=problems(404, 409))
async def delete_entitlement(
    store: StoreDep, counts: ShardCountsDep, principal: CurrentPrincipal, name: EntitlementName
) -> Response:
    """Admin: delete an entitlement that has no child and no job (409 naming them); its
    shard-map entry goes with it. A job or child submitted meanwhile either comes first (and
    the deletion is 409) or is refused with 409."""
    require_admin(principal)
    deleted, revision = await entitlements.delete(store, name, principal.name)
    await counts.wait_for(keys.SHARD_MAP, revision)
    return json_response(deleted)
