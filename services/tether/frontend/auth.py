"""Bearer-token authentication, and the admin and entitlement-membership checks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tether.frontend import records
from tether.frontend.deps import CacheDep, StoreDep
from tether.frontend.problems import Forbidden, NotFound, Unauthenticated
from tether.model import Entitlement, PrincipalRecord, token_digest
from tether.store import Store, keys
from tether.store.cache import StoreCache

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token: the admin's from `tether up` (.tether/admin.token), or one that "
    "POST /admin/principals returned.",
)


async def authenticate(
    store: StoreDep,
    cache: CacheDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> PrincipalRecord:
    """The principal whose token the request carries; 401 without a known bearer token.

    Looked up in the frontend's cache, then, for a token it does not hold (made a moment ago,
    perhaps through another frontend), in the store. A deleted principal's token works on
    until the cache hears of it: within the watch's delay."""
    if credentials is None:
        raise Unauthenticated("send the header 'Authorization: Bearer <token>'")
    found = await principal_of(store, cache, credentials.credentials)
    if found is None:
        raise Unauthenticated("the bearer token is not known to this region")
    return found


async def principal_of(store: Store, cache: StoreCache, token: str) -> PrincipalRecord | None:
    """The principal of `token`, from the cache (confirmed in the store when it is not
    there); None for a token the region does not know."""
    key = keys.principal(token_digest(token))
    record = await records.get_confirmed(store, cache, key, PrincipalRecord)
    return None if record is None else record.model


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
    store: Store, principal: PrincipalRecord, name: str, cache: StoreCache | None = None
) -> records.Record[Entitlement]:
    """The entitlement `name` if the principal may use it; 404 if missing, else 403.

    With `cache`, read from the frontend's cache first (`records.get_confirmed`): a membership
    revoked works on until the cache hears of it, as a deleted principal's token does."""
    key = keys.entitlement(name)
    if cache is None:
        record = await records.get(store, key, Entitlement)
    else:
        record = await records.get_confirmed(
            store, cache, key, Entitlement, lambda entitlement: can_see(principal, entitlement)
        )
    if record is None:
        raise NotFound(f"entitlement '{name}' does not exist")
    require_member(principal, record.model)
    return record
