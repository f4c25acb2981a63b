"""Keeping a lease alive in the background, and noticing at once when it is gone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from tether.aio import cancel_and_wait
from tether.store.base import LeaseNotFound, Store, StoreError

_log = logging.getLogger(__name__)


class LeaseKeeper:
    """Grants a lease and renews it every third of its TTL until stopped.

    `lost` is set when the lease is gone: the store says it expired, or no renewal has succeeded
    for a whole TTL (the store may already have expired it). Whoever holds keys on the lease must
    then stop acting on them: a scheduler leader steps down, an agent re-registers.
    """

    def __init__(self, store: Store, ttl_s: int) -> None:
        if ttl_s < 1:
            raise ValueError(f"lease TTL must be at least 1 second, got {ttl_s}")
        self._store = store
        self.ttl_s = ttl_s
        self.lease = 0
        self.lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Grants the lease and starts renewing it; returns the lease id."""
        self.lease = await self._store.lease_grant(self.ttl_s)
        self.lost.clear()
        self._task = asyncio.create_task(self._renew(), name=f"lease-{self.lease}")
        return self.lease

    async def stop(self, *, revoke: bool = True) -> None:
        """Stops renewing; with `revoke`, ends the lease now so its keys vanish at once."""
        await cancel_and_wait(self._task)
        self._task = None
        if revoke and self.lease and not self.lost.is_set():
            with contextlib.suppress(StoreError):
                await self._store.lease_revoke(self.lease)
        self.lost.set()

    async def _renew(self) -> None:
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                await asyncio.wait_for(self._store.lease_keepalive(self.lease), self.ttl_s / 3)
                last_renewed = time.monotonic()
            except LeaseNotFound:
                _log.warning("lease %x expired", self.lease)
                self.lost.set()
                return
            except (StoreError, TimeoutError) as error:
                if time.monotonic() - last_renewed >= self.ttl_s:
                    _log.warning("lease %x not renewed for %ss: %s", self.lease, self.ttl_s, error)
                    self.lost.set()
                    return
                _log.info("lease %x renewal failed, retrying: %s", self.lease, error)
