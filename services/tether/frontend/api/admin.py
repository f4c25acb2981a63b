"""/admin/principals: tokens for principals (admin only)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from tether.frontend.api import AUTH_PROBLEMS, problems, request_body
from tether.frontend.auth import CurrentPrincipal, require_admin
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, StoreDep
from tether.frontend.problems import Conflict
from tether.frontend.schemas.principals import NewPrincipal
from tether.model import PrincipalRecord, new_token, to_json, token_digest
from tether.store import keys

router = APIRouter(prefix="/admin", tags=["admin"], responses=AUTH_PROBLEMS)


@router.post(
    "/principals",
    status_code=201,
    response_model=NewPrincipal,
    responses=problems(400, 409, 413, 422),
    openapi_extra=request_body(
        PrincipalRecord,
        'The principal: {"name": "alice@example.com", "roles": ["admin"]}; roles may be omitted.',
    ),
)
async def create_principal(
    request: Request, store: StoreDep, settings: SettingsDep, principal: CurrentPrincipal
) -> Response:
    """Admin: a new token for a principal (a name may have several). The token is shown only
    in this answer; the region keeps its SHA-256."""
    require_admin(principal)
    body = await read_body(request, settings.max_body_bytes)
    record = parse_model(PrincipalRecord, body, request.headers.get("content-type"))
    token = new_token()
    if not await store.create(keys.principal(token_digest(token)), to_json(record)):
        # 256 random bits never collide; refuse rather than overwrite if they somehow did.
        raise Conflict("the new token collides with an existing one; try again")
    return NewPrincipal(name=record.name, roles=record.roles, token=token).response(201)
