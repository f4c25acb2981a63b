"""A service's registration: one key on the service's own lease, put again under a new lease
whenever the old one is lost, so that the key exists exactly while the service runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from tether.aio import cancel_and_wait
from tether.store.base import Store, StoreError
from tether.store.lease import LeaseKeeper

RETRY_S: Final = 1.0
"""Pause before registering again after a failed attempt."""

_log = logging.getLogger(__name__)


class Registration:
    """Puts `key` with `value()` on a lease of `ttl_s` (`start`), and again on a new lease
    whenever that one is lost; `stop` revokes the lease, which removes the key."""

    def __init__(
        self, store: Store, key: str, value: Callable[[], bytes], ttl_s: int, name: str
    ) -> None:
        self._store = store
        self._key = key
        self._value = value
        self._name = name
        self._lease = LeaseKeeper(store, ttl_s)
        self._keeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Registers (a store error is raised: the service cannot start) and keeps it so."""
        await self._register()
        self._keeper = asyncio.create_task(self._keep(), name=f"{self._name} registration")

    async def stop(self) -> None:
        await cancel_and_wait(self._keeper)
        self._keeper = None
        await self._lease.stop(revoke=True)

    async def _register(self) -> None:
        lease = await self._lease.start()
        await self._store.put(self._key, self._value(), lease=lease)

    async def _keep(self) -> None:
        while True:
            await self._lease.lost.wait()
            _log.warning("%s lost its registration lease; registering again", self._name)
            try:
                await self._register()
            except StoreError as error:
                _log.warning("%s could not register, retrying: %s", self._name, error)
                # Sets `lost` again (the lease may have been granted before the put failed).
                await self._lease.stop(revoke=True)
                await asyncio.sleep(RETRY_S)
