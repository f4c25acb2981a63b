"""The frontend process: the REST API served by uvicorn inside this process's event loop."""

from __future__ import annotations

import logging

from tether.frontend.app import create_app
from tether.frontend.events.hub import EventHub
from tether.frontend.settings import FrontendSettings
from tether.frontend.shard_counts import ShardCounts
from tether.service import HttpServer, Service
from tether.store import Store

log = logging.getLogger(__name__)


class Frontend(Service):
    """Serves the REST API on `settings.host:settings.port` (port 0: any free port).

    Owns `store`: stop() closes it.
    """

    name = "frontend"

    def __init__(self, store: Store, settings: FrontendSettings | None = None) -> None:
        self.store = store
        self.settings = settings or FrontendSettings()
        self.shard_counts = ShardCounts(store, self.settings.shard_counts_wait_s)
        """What each shard holds, counted from watches while the frontend serves."""
        app = create_app(self.store, self.settings, self.shard_counts)
        self._events: EventHub = app.state.events
        self._http = HttpServer(
            app,
            self.settings.host,
            self.settings.port,
            name="frontend",
            tls=self.settings.tls,
        )

    @property
    def port(self) -> int:
        """The port it serves on (the actual one once started, also for port 0)."""
        return self._http.port

    @property
    def url(self) -> str:
        """The base URL it serves on, with the actual port once started."""
        return self._http.url

    async def start(self) -> None:
        await self._http.start()
        log.info("serving the REST API on %s", self.url)

    async def stop(self) -> None:
        try:
            # Followers' streams never end on their own: the server would wait for them.
            await self._events.close()
            await self._http.stop()
        finally:
            await self.store.close()
