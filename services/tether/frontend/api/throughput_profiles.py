"""/v1/throughput-profiles: list, put, show and delete an entitlement's throughput profiles.

Accelerator throughputs kept per entitlement for its application-level schedulers (Gavel's
rounds)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from pydantic import ValidationError
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, problems, request_body
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement, visible_entitlements
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, StoreDep
from tether.frontend.problems import Conflict, NotFound, validation_problem
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas import json_response
from tether.frontend.schemas.throughput_profiles import (
    ThroughputProfileBody,
    ThroughputProfileList,
)
from tether.model import Name, to_json
from tether.model.accelerator import ThroughputProfileRecord
from tether.store import Delete, Put, Store, key_exists, key_missing, keys

router = APIRouter(
    prefix="/v1/throughput-profiles", tags=["throughput profiles"], responses=AUTH_PROBLEMS
)

ProfileName = Annotated[Name, Path(description="The throughput profile's name.")]


@router.get("", response_model=ThroughputProfileList, responses=problems(404))
async def list_throughput_profiles(
    store: ReadsDep,
    principal: CurrentPrincipal,
    entitlement: Annotated[
        Name | None, Query(description="Only this entitlement's profiles.")
    ] = None,
) -> Response:
    """Throughput profiles of the entitlements the principal belongs to (all for admins)."""
    if entitlement is not None:
        await authorize_entitlement(store, principal, entitlement)
        prefix = keys.throughput_profiles_of(entitlement)
        found = await records.scan(store, prefix, ThroughputProfileRecord)
    else:
        found = await records.scan(store, keys.THROUGHPUT_PROFILES, ThroughputProfileRecord)
        if not principal.is_admin:
            visible = await visible_entitlements(store, principal)
            found = [profile for profile in found if profile.entitlement in visible]
    return ThroughputProfileList(throughput_profiles=found).response()


@router.put(
    "/{ent}/{name}",
    response_model=ThroughputProfileRecord,
    responses=problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(
        ThroughputProfileBody,
        'The throughputs: {"throughputs": {"v100": {"ResNet-50": {"1": 4.39}}}}.',
    ),
)
async def put_throughput_profile(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
    name: ProfileName,
) -> Response:
    """Create or replace a throughput profile of the entitlement: each job type's steps per
    second on each accelerator type, at each scale factor (Gavel's format). 422 naming where
    the table is wrong."""
    await authorize_entitlement(store, principal, ent)
    body = await read_body(request, settings.max_body_bytes)
    wanted = parse_model(ThroughputProfileBody, body, request.headers.get("content-type"))
    try:
        profile = ThroughputProfileRecord(
            name=name, entitlement=ent, throughputs=wanted.throughputs
        )
    except ValidationError as exc:
        raise validation_problem(exc.errors()) from None
    # Not into an entitlement deleted meanwhile: one of the same name created later would
    # find another team's profile.
    written = await store.txn(
        [key_exists(keys.entitlement(ent)), key_missing(keys.entitlement_deletion(ent))],
        [Put(keys.throughput_profile(ent, name), to_json(profile))],
    )
    if not written.succeeded:
        raise Conflict(f"entitlement '{ent}' is being deleted")
    return json_response(profile)


@router.get("/{ent}/{name}", response_model=ThroughputProfileRecord, responses=problems(404))
async def get_throughput_profile(
    store: ReadsDep, principal: CurrentPrincipal, ent: EntitlementName, name: ProfileName
) -> Response:
    """One throughput profile."""
    await authorize_entitlement(store, principal, ent)
    return json_response(await _existing(store, ent, name))


@router.delete("/{ent}/{name}", response_model=ThroughputProfileRecord, responses=problems(404))
async def delete_throughput_profile(
    store: StoreDep, principal: CurrentPrincipal, ent: EntitlementName, name: ProfileName
) -> Response:
    """Delete a throughput profile, answering with it."""
    await authorize_entitlement(store, principal, ent)
    found = await _existing(store, ent, name)
    await store.txn([], [Delete(keys.throughput_profile(ent, name))])
    return json_response(found)


async def _existing(store: Store, ent: str, name: str) -> ThroughputProfileRecord:
    found = await records.get(store, keys.throughput_profile(ent, name), ThroughputProfileRecord)
    if found is None:
        raise NotFound(f"throughput profile '{ent}/{name}' does not exist")
    return found.model
