"""Bearer-token authentication, and the admin and entitlement-membership checks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tether.frontend import records
from tether.frontend.deps import StoreDep
from tether.frontend.problems import Forbidden, NotFound, Unauthenticated
from tether.model import Entitlement, PrincipalRecord, token_digest
from tether.store import Store, keys

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token: the admin's from `tether up` (.tether/admin.token), or one that "
    "POST /admin/principals returned.",
)


async def authenticate(
    store: StoreDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> PrincipalRecord:
    """The principal whose token the request carries; 401 without a known bearer token."""
    if credentials is None:
        raise Unauthenticated("send the header 'Authorization: Bearer <token>'")
    record = await records.get(
        store, keys.principal(token_digest(credentials.credentials)), PrincipalRecord
    )
    if record is None:
        raise Unauthenticated("the bearer token is not known to this region")
    return record.model


CurrentPrincipal = Annotated[PrincipalRecord, Depends(authenticate)]


def require_admin(principal: PrincipalRecord) -> None:
    """403 unless the principal has the admin role."""
    if not principal.is_admin:
        raise Forbidden(f"principal '{principal.name}' is not an admin")


def require_operator(principal: PrincipalRecord) -> None:
    """403 unless the principal has the operator (or admin) role."""
    if not principal.is_operator:
        raise Forbidden(f"principal '{principal.name}' is not an operator")


def can_see(principal: PrincipalRecord, entitlement: Entitlement) -> bool:
    """Admins see every entitlement, others those that list them as members."""
    return principal.may_use(entitlement)


async def visible_entitlements(store: Store, principal: PrincipalRecord) -> set[str]:
    """The names of the entitlements the principal may see."""
    entitlements = await records.scan(store, keys.ENTITLEMENTS, Entitlement)
    return {ent.name for ent in entitlements if can_see(principal, ent)}


def require_member(principal: PrincipalRecord, entitlement: Entitlement) -> None:
    """403 naming the entitlement unless the principal may use it."""
    if not can_see(principal, entitlement):
        raise Forbidden(
            f"principal '{principal.name}' is not a member of entitlement '{entitlement.name}'"
        )


async def authorize_entitlement(
    store: Store, principal: PrincipalRecord, name: str
) -> records.Record[Entitlement]:
    """The entitlement `name` if the principal may use it; 404 if missing, else 403."""
    record = await records.get(store, keys.entitlement(name), Entitlement)
    if record is None:
        raise NotFound(f"entitlement '{name}' does not exist")
    require_member(principal, record.model)
    return record
