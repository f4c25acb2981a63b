"""/metrics: the frontend process's Prometheus metrics, and the middleware counting requests."""

from __future__ import annotations

import time
from typing import Final

from fastapi import APIRouter, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether import metrics
from tether.frontend.api import problems
from tether.frontend.auth import CurrentPrincipal

router = APIRouter(tags=["metrics"])

_METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED: Final = "unmatched"
"""The `route` label of requests no route matched: their paths would be unbounded labels."""


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}, "application/openmetrics-text": {}}},
        **problems(401, 503),
    },
)
async def metrics_text(request: Request, principal: CurrentPrincipal) -> Response:
    """The process's metrics in Prometheus' text format (OpenMetrics if asked for); a token of
    any principal reads them, so a scraper gets one without any role."""
    body, content_type = metrics.exposition(request.headers.get("accept", ""))
    return Response(body, media_type=content_type)


class RequestMetrics:
    """ASGI middleware: counts and times each request by method, route template and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # An exception escaping the app becomes a 500 further out.
        status = 500

        async def status_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        try:
            await self.app(scope, receive, status_send)
        finally:
            method = scope["method"] if scope["method"] in _METHODS else "other"
            # The router leaves the matched route in the scope; its template, not the path,
            # keeps the label's values few.
            route = getattr(scope.get("route"), "path", UNMATCHED)
            metrics.FRONTEND_REQUESTS.labels(method, route, str(status)).inc()
            metrics.FRONTEND_REQUEST_SECONDS.labels(method, route).observe(
                time.perf_counter() - started
            )
