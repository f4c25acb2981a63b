"""A bound on how long an API request waits for an unreachable store: a quick 503, not a hang."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from tether.store.base import wait_limit


class StoreWaitLimit:
    """ASGI middleware: the store requests of an HTTP request wait at most `seconds` each for a
    store that cannot be reached, and the request then gets the 503 problem.

    Services wait for the store's whole deadline (`TETHER_STORE_TIMEOUT_S`, 10 s), which is as
    long as the SDK's and the CLI's own timeout: without this bound a caller would see its
    request time out instead of the 503 that says why.
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with wait_limit(self.seconds):
            await self.app(scope, receive, send)
