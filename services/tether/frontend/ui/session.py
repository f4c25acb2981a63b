"""Who is looking at the dashboard: the token the login page took, kept in a cookie."""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials

from tether.frontend.auth import authenticate
from tether.frontend.deps import CacheDep, StoreDep
from tether.frontend.problems import Unauthenticated
from tether.model import PrincipalRecord

COOKIE: Final = "tether_token"
"""The token, HttpOnly and SameSite=Strict: page scripts never see it, other sites never send it."""
COOKIE_PATH: Final = "/ui"


class LoginRequired(Exception):
    """No known token in the cookie: the page sends the browser to the login page."""


async def ui_principal(request: Request, store: StoreDep, cache: CacheDep) -> PrincipalRecord:
    """The principal of the cookie's token, as the API authenticates a bearer token."""
    token = request.cookies.get(COOKIE)
    if not token:
        raise LoginRequired
    credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
    try:
        return await authenticate(store, cache, credentials)
    except Unauthenticated:
        raise LoginRequired from None


UiPrincipal = Annotated[PrincipalRecord, Depends(ui_principal)]
