"""The frontend process: the REST API served by uvicorn inside this process's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn

from tether.frontend.app import create_app
from tether.frontend.settings import FrontendSettings
from tether.service import Service
from tether.store import Store

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The process's Service runner owns SIGINT/SIGTERM and calls stop(); uvicorn taking
        # them over would end the server but leave the process running.
        yield


class Frontend(Service):
    """Serves the REST API on `settings.host:settings.port` (port 0: any free port).

    Owns `store`: stop() closes it.
    """

    name = "frontend"

    def __init__(self, store: Store, settings: FrontendSettings | None = None) -> None:
        self.store = store
        self.settings = settings or FrontendSettings()
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = self.settings.port

    @property
    def url(self) -> str:
        """The base URL it serves on, with the actual port once started."""
        host = self.settings.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    async def start(self) -> None:
        # Binding here makes a taken port fail start() with OSError (uvicorn would sys.exit)
        # and tells us the port that port 0 picked.
        family = socket.AF_INET6 if ":" in self.settings.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.settings.host, self.settings.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(self.store, self.settings), log_config=None, lifespan="on"
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="frontend")
        while not self._server.started:
            if self._task.done():
                sock.close()
                await self._task
                raise RuntimeError("the frontend's HTTP server stopped while starting")
            await asyncio.sleep(0.01)
        log.info("serving the REST API on %s", self.url)

    async def stop(self) -> None:
        try:
            if self._server is not None and self._task is not None:
                self._server.should_exit = True
                await self._task
        finally:
            self._server = self._task = None
            await self.store.close()
