"""The dashboard's frame: logging in and out, the live event stream pages follow, its static
files, and `install`, which adds it all to the app."""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.staticfiles import StaticFiles
from starlette.responses import RedirectResponse, Response

from tether.frontend.auth import authenticate, principal_of
from tether.frontend.bodies import read_body
from tether.frontend.deps import CacheDep, EventsDep, SettingsDep, StoreDep
from tether.frontend.events.stream import EventFilter, response
from tether.frontend.problems import Forbidden, Unauthenticated
from tether.frontend.ui import accelerators, entitlements, jobs, machines, overview
from tether.frontend.ui.render import page
from tether.frontend.ui.session import COOKIE, COOKIE_PATH, LoginRequired, UiPrincipal

router = APIRouter(prefix="/ui", include_in_schema=False)

HOME: Final = "/ui/overview"
MAX_FORM_BYTES: Final = 4096


@router.get("")
async def home() -> Response:
    return RedirectResponse(HOME, status_code=303)


@router.get("/login")
async def login_page() -> Response:
    return page("login.html", None, error="")


@router.post("/login")
async def log_in(request: Request, store: StoreDep, cache: CacheDep) -> Response:
    """Takes the token from the form; a known one is kept in the cookie."""
    same_site(request)
    body = await read_body(request, MAX_FORM_BYTES)
    token = parse_qs(body.decode(errors="replace")).get("token", [""])[0].strip()
    if not token:
        return page("login.html", None, status=400, error="Paste a token to log in.")
    try:
        await authenticate(
            store, cache, HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
        )
    except Unauthenticated:
        return page("login.html", None, status=401, error="This region does not know that token.")
    answer = RedirectResponse(HOME, status_code=303)
    # Secure when the dashboard is served over TLS: the cookie holds the token.
    secure = request.url.scheme == "https"
    answer.set_cookie(
        COOKIE, token, path=COOKIE_PATH, httponly=True, samesite="strict", secure=secure
    )
    return answer


@router.post("/logout")
async def log_out(request: Request) -> Response:
    same_site(request)
    answer = RedirectResponse("/ui/login", status_code=303)
    answer.delete_cookie(COOKIE, path=COOKIE_PATH)
    return answer


@router.get("/events")
async def follow(
    request: Request,
    store: StoreDep,
    cache: CacheDep,
    hub: EventsDep,
    settings: SettingsDep,
    principal: UiPrincipal,
    job: str | None = None,
    machine: str | None = None,
) -> Response:
    """The events the page shows, from now on (pages refresh their live parts on each)."""
    wanted = EventFilter(principal, job=job, machine=machine)
    subscription = await hub.subscribe(None, await store.revision())
    token = request.cookies.get(COOKIE, "")
    return response(
        hub,
        subscription,
        wanted,
        until=None,
        keepalive_s=settings.events_keepalive_s,
        recheck=lambda: principal_of(store, cache, token),
    )


def same_site(request: Request) -> None:
    """403 for a form another site posts (browsers name the page's origin in `Origin`): the
    login and logout forms are plain forms, without htmx's header."""
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        raise Forbidden(f"a form of {origin} may not log in or out of this dashboard")


def _to_login(request: Request, error: Exception) -> Response:
    # htmx follows HX-Redirect; a plain navigation follows the 303.
    if request.headers.get("HX-Request"):
        return Response(status_code=401, headers={"HX-Redirect": "/ui/login"})
    return RedirectResponse("/ui/login", status_code=303)


def install(app: FastAPI) -> None:
    """Serves the dashboard at /ui."""
    app.include_router(router)
    app.include_router(overview.router)
    app.include_router(entitlements.router)
    app.include_router(accelerators.router)
    app.include_router(jobs.router)
    app.include_router(machines.router)
    static = Path(__file__).parent / "static"
    app.mount("/ui/static", StaticFiles(directory=static), name="ui-static")
    app.add_exception_handler(LoginRequired, _to_login)
