"""A shorter way through the app for the GETs clients repeat most: the same endpoint functions,
called with their arguments resolved directly rather than by FastAPI's routing and dependency
solving, which took half of a cached GET's CPU.

Only a plain request takes it: a route of `FAST_ROUTES`, no query but a `min_revision`, valid
path parameters and a known bearer token. Anything else, and any error the endpoint raises, goes the
usual way instead (a GET changes nothing, so it is simply answered again there), which keeps
every error answer, and every route's contract, in one place: FastAPI's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import TypeAdapter
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from tether import metrics
from tether.frontend.api import jobs, tasks
from tether.frontend.auth import authenticate
from tether.frontend.revisions import RevisionNoting, reads_for
from tether.model import Name

_NAME: TypeAdapter[str] = TypeAdapter(Name)

Endpoint = Callable[..., Awaitable[Response]]


@dataclass(frozen=True)
class FastRoute:
    """A GET route whose endpoint takes exactly `store` (its reads), `principal` and the
    path's names."""

    path: str
    endpoint: Endpoint

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(self.path.strip("/").split("/"))


FAST_ROUTES = (
    FastRoute("/v1/jobs/{ent}/{job}", jobs.get_job),
    FastRoute("/v1/jobs/{ent}/{job}/tasks", tasks.list_tasks),
)


@dataclass(frozen=True)
class _Bound:
    """A fast route with the app's route of the same path (its metrics label)."""

    segments: tuple[str, ...]
    endpoint: Endpoint
    route: APIRoute


def bind_fast_routes(
    routes: Sequence[BaseRoute], fast: Sequence[FastRoute] = FAST_ROUTES
) -> list[_Bound]:
    """Each fast route with the app's GET route that has its path and endpoint; a fast route
    the app does not serve the same way is a mistake, reported at startup."""
    by_path = {
        route.path: route
        for route in routes
        if isinstance(route, APIRoute) and "GET" in (route.methods or ())
    }
    bound = []
    for fast_route in fast:
        route = by_path.get(fast_route.path)
        if route is None or route.endpoint is not fast_route.endpoint:
            raise ValueError(f"no GET route {fast_route.path} served by {fast_route.endpoint}")
        bound.append(_Bound(fast_route.segments, fast_route.endpoint, route))
    return bound


class FastReads:
    """ASGI middleware answering plain GETs of `FAST_ROUTES` (see the module's docstring)."""

    def __init__(self, app: ASGIApp, routes: list[_Bound]) -> None:
        self.app = app
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            response = await self._answer(scope)
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope) -> Response | None:
        """The response of the route the request names, or None: the usual way answers it."""
        segments = scope["path"].strip("/").split("/")
        for bound in self._routes:
            names = _names(bound.segments, segments)
            if names is not None:
                break
        else:
            return None
        token = _bearer_token(scope)
        min_revision = _min_revision(scope["query_string"])
        if token is None or min_revision == _OTHER_QUERY:
            return None
        app: FastAPI = scope["app"]
        state = app.state
        try:
            for name, value in names.items():
                names[name] = _NAME.validate_python(value)
            credentials = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
            principal = await authenticate(state.store, state.cache, credentials)
            store: RevisionNoting = state.store
            reads = await reads_for(
                store, state.cache, state.settings, min_revision=min_revision or None
            )
            response = await bound.endpoint(store=reads, principal=principal, **names)
        except Exception:
            # Answered again the usual way, errors included.
            return None
        scope["route"] = bound.route
        metrics.FRONTEND_FAST_READS.labels(bound.route.path).inc()
        return response


def _names(patterns: tuple[str, ...], segments: list[str]) -> dict[str, Any] | None:
    """The path's names if its segments match the route's `patterns`, else None."""
    if len(patterns) != len(segments):
        return None
    names = {}
    for pattern, segment in zip(patterns, segments, strict=True):
        if pattern.startswith("{"):
            names[pattern[1:-1]] = segment
        elif pattern != segment:
            return None
    return names


_OTHER_QUERY = -1


def _min_revision(query: bytes) -> int:
    """The query's `min_revision` (0: no query); `_OTHER_QUERY` for any other query, or a
    `min_revision` FastAPI would refuse."""
    if not query:
        return 0
    name, _, value = query.partition(b"=")
    if name != b"min_revision" or not value.isdigit() or int(value) < 1:
        return _OTHER_QUERY
    return int(value)


def _bearer_token(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() or None if scheme.lower() == "bearer" else None
    return None
