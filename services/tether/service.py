"""The shape of every long-running Tether process: a `Service` with `start()` and `stop()`."""

from __future__ import annotations

import abc
import asyncio
import logging
import signal
import sys

from tether.config import StoreSettings
from tether.store import Store, open_store

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


def configure_logging(level: str = "INFO") -> None:
    """Plain, timestamped lines on stderr; `tether up` sends each process's to its own file."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT, stream=sys.stderr, force=True)


def connect_store(url: str | None = None) -> Store:
    """The store named by `url`, or by TETHER_STORE when `url` is None."""
    # By its alias: the field's validation alias makes pydantic ignore a plain `url=` keyword.
    settings = StoreSettings() if url is None else StoreSettings(TETHER_STORE=url)
    return open_store(settings=settings)


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


def run(service: Service, log_level: str = "INFO") -> None:
    """The body of every service's CLI subcommand."""
    configure_logging(log_level)
    asyncio.run(serve_until_signalled(service))
