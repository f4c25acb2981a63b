"""The Allow header of a 405: every method the path takes, not only its first route's."""

from __future__ import annotations

import re
from collections.abc import Iterable
from http import HTTPStatus

from fastapi import FastAPI, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from tether.frontend import problems


class AllowedMethods:
    """The path pattern and methods of each route.

    A path with a route per method (GET and POST /v1/jobs) is several routes to Starlette. A
    method none of them takes gets the 405 of the first whose path matched, whose `Allow`
    names that route's methods alone; RFC 9110 asks for every method the resource supports.
    """

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        self._routes: list[tuple[re.Pattern[str], frozenset[str]]] = [
            (route.path_regex, frozenset(route.methods))
            for route in routes
            if isinstance(route, Route) and route.methods
        ]

    def of(self, path: str) -> list[str]:
        """Every method some route of `path` takes, sorted; empty for a path no route has."""
        matched = (methods for pattern, methods in self._routes if pattern.match(path))
        return sorted({method for methods in matched for method in methods})


def install(app: FastAPI, routes: Iterable[BaseRoute]) -> None:
    """Answers every 405 of `app` as a problem whose `Allow` lists each method of the path's
    `routes` (all of the app's, those of included routers too)."""
    allowed = AllowedMethods(routes)

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        response = await problems.on_http_exception(request, exc)
        # The path as routing matched it (decoded; the frontend is mounted at the root).
        methods = allowed.of(request.scope["path"])
        if methods:
            response.headers["Allow"] = ", ".join(methods)
        return response

    # A status's handler comes before the handler of HTTPException as a whole.
    app.add_exception_handler(HTTPStatus.METHOD_NOT_ALLOWED, method_not_allowed)
