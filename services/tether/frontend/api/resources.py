"""/v1/resources: ESCHER's ephemeral resources. Set a grant of an entitlement's label, read the
cluster state (per machine, capacity and free of each label), delete a label.

A label belongs to the entitlement that set it: only its members see it, and only its tasks
consume it (asking for it in `resources.extra`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, problems, request_body
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement, visible_entitlements
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import AllocatorsDep, CacheDep, SettingsDep, StoreDep
from tether.frontend.ephemeral import delete_resource, resource_views, set_resource
from tether.frontend.problems import NotFound
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas import json_response
from tether.frontend.schemas.resources import ResourceList, ResourceView, SetResourceRequest
from tether.model import Name
from tether.model.ephemeral import EphemeralResource
from tether.store import keys

router = APIRouter(prefix="/v1/resources", tags=["ephemeral resources"], responses=AUTH_PROBLEMS)

LabelName = Annotated[Name, Path(description="The ephemeral resource's label.")]
Limit = Annotated[int, Query(ge=1, le=100_000, description="At most this many machines per label.")]


@router.post(
    "",
    response_model=EphemeralResource,
    responses=problems(400, 404, 409, 413, 422, 503),
    openapi_extra=request_body(
        SetResourceRequest,
        '{"entitlement": "ml", "label": "gang-7", "capacity": 1, "node_spec": {"machine": '
        '"m-12"}, "owner_job": "train-7"}',
    ),
)
async def post_resource(
    request: Request,
    store: StoreDep,
    cache: CacheDep,
    allocators: AllocatorsDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
) -> Response:
    """`set_resource(label, capacity, node_spec)`: gives every machine `node_spec` matches
    `capacity` of the entitlement's label (creating it), which the entitlement's tasks may then
    ask for in `resources.extra`. A grant naming a machine wins there; else the last of the
    others that matches. 422 for a capacity below 0, an unknown machine or owner job, or a
    label that is a built-in dimension; 409 when it would leave running tasks holding more
    than the new capacity (they are named)."""
    body = await read_body(request, settings.max_body_bytes)
    wanted = parse_model(SetResourceRequest, body, request.headers.get("content-type"))
    await authorize_entitlement(store, principal, wanted.entitlement, cache)
    return json_response(await set_resource(store, cache, allocators, wanted))


@router.get("", response_model=ResourceList, responses=problems(404, 503))
async def list_resources(
    store: ReadsDep,
    allocators: AllocatorsDep,
    principal: CurrentPrincipal,
    entitlement: Annotated[Name | None, Query(description="Only this entitlement's.")] = None,
    label: Annotated[Name | None, Query(description="Only this label.")] = None,
    limit: Limit = 1000,
) -> Response:
    """The cluster state: each ephemeral resource the principal may see, with its machines'
    capacity, what the entitlement's tasks hold and what is free."""
    if entitlement is not None:
        await authorize_entitlement(store, principal, entitlement)
        found = await records.scan(
            store, keys.ephemeral_resources_of(entitlement), EphemeralResource
        )
    else:
        found = await records.scan(store, keys.EPHEMERAL_RESOURCES, EphemeralResource)
        if not principal.is_admin:
            visible = await visible_entitlements(store, principal)
            found = [record for record in found if record.entitlement in visible]
    if label is not None:
        found = [record for record in found if record.label == label]
    views = await resource_views(allocators, found, limit)
    return ResourceList(resources=views).response()


@router.get("/{ent}/{label}", response_model=ResourceView, responses=problems(404, 503))
async def get_resource(
    store: ReadsDep,
    allocators: AllocatorsDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
    label: LabelName,
    limit: Limit = 1000,
) -> Response:
    """One ephemeral resource and its machines."""
    await authorize_entitlement(store, principal, ent)
    found = await records.get(store, keys.ephemeral_resource(ent, label), EphemeralResource)
    if found is None:
        raise NotFound(f"ephemeral resource '{ent}/{label}' does not exist")
    (view,) = await resource_views(allocators, [found.model], limit)
    return view.response()


@router.delete("/{ent}/{label}", response_model=EphemeralResource, responses=problems(404))
async def delete_resource_route(
    store: StoreDep, principal: CurrentPrincipal, ent: EntitlementName, label: LabelName
) -> Response:
    """Delete an ephemeral resource, answering with it. Running tasks keep what they hold;
    no more are placed on it."""
    await authorize_entitlement(store, principal, ent)
    return json_response(await delete_resource(store, ent, label))
