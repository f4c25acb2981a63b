"""The shape of every long-running Tether process: a `Service` with `start()` and `stop()`."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal, NoReturn

import grpc
import uvicorn
from starlette.types import ASGIApp

from tether.aio import wait_set
from tether.config import StoreSettings, TlsSettings
from tether.model import RegionConfig, from_json
from tether.store import Store, StoreError, StoreMissing, keys, open_store
from tether.tls import http_scheme, http_server_options

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class Service(abc.ABC):
    """A Tether process: `start()` returns once it serves, `stop()` once it has let go.

    Services keep no state of their own beyond caches: everything that matters is in the store,
    so `stop()` may be skipped entirely (a crash) without losing anything.
    """

    name: str
    """Used in logs and in the process title, e.g. "scheduler shard-0"."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...


class RegionError(StoreError):
    """The store holds no region, or one this service cannot work with: it must not start."""


def _no_region(url: str, why: str) -> RegionError:
    return RegionError(
        f"the store at {url} holds no region ({why}): set TETHER_STORE (or --store) to the "
        "region's store, as region.json records it, or create a region with `tether up`"
    )


async def read_region(store: Store) -> RegionConfig:
    """The region's config; RegionError when the store holds none (a service started on the
    wrong store must refuse to run rather than work on an empty one)."""
    kv = await store.get(keys.region_config())
    if kv is None:
        raise _no_region(store.url, f"{keys.region_config()} is missing")
    return from_json(RegionConfig, kv.value, stored=True)


class InRegion(Service):
    """`service`, started only once `store` is found to hold a region: a service started on the
    wrong store (TETHER_STORE unset, a typo) refuses to run instead of serving an empty one."""

    def __init__(self, service: Service, store: Store) -> None:
        self.name = service.name
        self.service = service
        self._store = store

    async def start(self) -> None:
        try:
            await read_region(self._store)
        except BaseException:
            await self._store.close()
            raise
        await self.service.start()

    async def stop(self) -> None:
        await self.service.stop()


def grpc_status_of(
    error: Exception, codes: Mapping[type[Exception], grpc.StatusCode]
) -> grpc.StatusCode:
    """The code `codes` gives the most specific class of `error`; INTERNAL for the unexpected."""
    for cls in type(error).__mro__:
        if cls in codes:
            return codes[cls]
    return grpc.StatusCode.INTERNAL


async def grpc_abort(
    context: grpc.aio.ServicerContext[Any, Any],
    error: Exception,
    codes: Mapping[type[Exception], grpc.StatusCode],
    expected: tuple[type[Exception], ...],
) -> NoReturn:
    """Ends a call with the status `codes` gives `error`: an `expected` error's own message,
    anything else logged with its traceback and named as internal."""
    if isinstance(error, expected):
        message = str(error)
    else:
        logging.getLogger(__name__).exception("request failed unexpectedly")
        message = f"internal error: {type(error).__name__}: {error}"
    await context.abort(grpc_status_of(error, codes), message)


def configure_logging(level: str = "INFO") -> None:
    """Plain, timestamped lines on stderr; `tether up` sends each process's to its own file."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr, force=True)


def connect_store(url: str | None = None, *, create: bool = True) -> Store:
    """The store named by `url`, or by TETHER_STORE when `url` is None. Without `create`, for a
    service that needs the region in it: a SQLite file that does not exist is a RegionError,
    and is not created (nor its directory)."""
    # By its alias: the field's validation alias makes pydantic ignore a plain `url=` keyword.
    settings = StoreSettings() if url is None else StoreSettings(TETHER_STORE=url)
    try:
        return open_store(settings=settings, create=create)
    except StoreMissing:
        raise _no_region(settings.url, "there is no such file") from None


async def serve_until_signalled(service: Service) -> None:
    """Starts `service`, runs it until SIGINT or SIGTERM, then stops it."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    log = logging.getLogger(service.name)
    await service.start()
    log.info("started")
    try:
        await stopping.wait()
    finally:
        log.info("stopping")
        try:
            await service.stop()
        except Exception:
            log.exception("did not stop cleanly")
        else:
            log.info("stopped")


GC_THRESHOLDS: Final = (50_000, 20, 10)
"""The garbage collector's thresholds in every service process (Python's: 700, 10, 10). A
service holds a large heap that lives long (mirrors, indexes, a thousand simulated agents) and
allocates fast: with a collection of the youngest objects every 700 allocations, many short-lived
ones were old enough to be promoted by the time they died, and each quarter of growth of the old
generation cost a full collection of the whole heap. In `bench_region` the simulated machines
spent 2.2 of their 9.2 s of CPU collecting (1.6 s in 8 full collections), and none with these."""


def run(service: Service, log_level: str = "INFO") -> NoReturn:
    """The body of every service's CLI subcommand: serves until SIGINT/SIGTERM, then ends the
    process."""
    configure_logging(log_level)
    gc.set_threshold(*GC_THRESHOLDS)
    asyncio.run(serve_until_signalled(service))
    # The service has stopped and closed its store. Python's own finalization (tearing down
    # every module and object) took about a second more, which each phase of `tether down`
    # and every restart waited for; nothing of it matters once the logs are flushed.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers, and without waking ten times a second."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.exiting = asyncio.Event()
        """Set with `should_exit`: the main loop ends at once."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # SIGINT/SIGTERM belong to `serve_until_signalled`, which stops the whole service;
        # uvicorn taking them over would end the server but leave the process running.
        yield

    async def main_loop(self) -> None:
        # uvicorn's own loop looks at `should_exit` every 0.1 s, which was most of what an idle
        # service did. Once a second still refreshes the Date header (every tick refreshes
        # it when the counter is a multiple of 10); `exiting` ends the wait early.
        counter = 0
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            await wait_set(self.exiting, 1.0)


class HttpServer:
    """An ASGI app served by uvicorn on the running event loop, inside a service's process.

    `start()` binds the socket itself, so a taken port fails with OSError instead of uvicorn's
    sys.exit, and port 0 picks a free port (`port` holds it afterwards). Each request is
    logged (uvicorn's access log) when the process logs at DEBUG, unless `access_log` says.
    """

    def __init__(
        self,
        app: ASGIApp,
        host: str,
        port: int,
        *,
        name: str,
        lifespan: Literal["on", "off"] = "on",
        access_log: bool | None = None,
        graceful_shutdown_s: int | None = None,
        tls: TlsSettings | None = None,
        verify_clients: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        self._name = name
        self._scheme = http_scheme(tls) if tls else "http"
        if access_log is None:
            # A line per request costs a busy frontend a twentieth of its CPU: kept for
            # debugging, as the kube-apiserver keeps its request log for higher verbosity.
            access_log = logging.getLogger().isEnabledFor(logging.DEBUG)
        # log_config=None: uvicorn logs through the process's own handlers and format.
        # httptools parses HTTP (uvicorn picks it when it is installed): h11, pure Python,
        # cost a cached GET a tenth of its CPU.
        self._config = uvicorn.Config(
            app,
            log_config=None,
            http="httptools",
            lifespan=lifespan,
            access_log=access_log,
            timeout_graceful_shutdown=graceful_shutdown_s,
            **(http_server_options(tls, verify_clients=verify_clients) if tls else {}),
        )
        self._server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        """`http://host:port` (`https` with TLS), with the actual port once started."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self._scheme}://{host}:{self.port}"

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP named, not implied by 0: asyncio turns Nagle's algorithm off only for
        # sockets that say they are TCP, and with it on, a response written as headers then
        # body waited for the client's delayed ACK, 40 ms per request.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._server = _QuietServer(self._config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=self._name)
        while not self._server.started:
            if self._task.done():
                sock.close()
                with contextlib.suppress(SystemExit):
                    await self._task
                raise RuntimeError(f"the {self._name} HTTP server stopped while starting")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            self._server.exiting.set()
            await self._task
        self._server = self._task = None
