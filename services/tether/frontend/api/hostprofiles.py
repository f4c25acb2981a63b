"""/v1/host-profiles: list, show, create (admin) and delete (admin) host profiles."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from tether.frontend import hostprofiles, records
from tether.frontend.api import AUTH_PROBLEMS, problems, request_body
from tether.frontend.auth import CurrentPrincipal, require_admin
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, StoreDep
from tether.frontend.problems import NotFound
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas import json_response
from tether.frontend.schemas.hostprofiles import HostProfileList
from tether.model import HostProfile, Name
from tether.store import keys

router = APIRouter(prefix="/v1/host-profiles", tags=["host profiles"], responses=AUTH_PROBLEMS)

ProfileName = Annotated[Name, Path(description="The host profile's name.")]


@router.get("", response_model=HostProfileList)
async def list_host_profiles(store: ReadsDep, principal: CurrentPrincipal) -> Response:
    """Every host profile, by name."""
    found = await records.scan(store, keys.HOST_PROFILES, HostProfile)
    return HostProfileList(host_profiles=found).response()


@router.post(
    "",
    status_code=201,
    response_model=HostProfile,
    responses=problems(400, 409, 413, 422),
    openapi_extra=request_body(
        HostProfile,
        'The profile: {"name": "web", "settings": {"hugepages": "2048"}, "switch_seconds": 5}.',
    ),
)
async def create_host_profile(
    request: Request, store: StoreDep, settings: SettingsDep, principal: CurrentPrincipal
) -> Response:
    """Admin: create a host profile, the settings a machine switches to (with the agent's
    profile hook) before it runs the tasks of an entitlement that names it. 409 if one of that
    name exists: a profile is created once, never replaced."""
    require_admin(principal)
    body = await read_body(request, settings.max_body_bytes)
    profile = parse_model(HostProfile, body, request.headers.get("content-type"))
    await hostprofiles.create(store, profile)
    return json_response(profile, 201, {"Location": f"{router.prefix}/{profile.name}"})


@router.get("/{name}", response_model=HostProfile, responses=problems(404))
async def get_host_profile(
    store: ReadsDep, principal: CurrentPrincipal, name: ProfileName
) -> Response:
    """One host profile."""
    found = await records.get(store, keys.host_profile(name), HostProfile)
    if found is None:
        raise NotFound(f"host profile '{name}' does not exist")
    return json_response(found.model)


@router.delete("/{name}", response_model=HostProfile, responses=problems(404, 409))
async def delete_host_profile(
    store: StoreDep, principal: CurrentPrincipal, name: ProfileName
) -> Response:
    """Admin: delete a host profile, answering with it. 409, naming them, while an entitlement
    names it, a machine carries it or an allocation record asks a machine for it."""
    require_admin(principal)
    return json_response(await hostprofiles.delete(store, name))
