"""Keeping a lease alive in the background, and noticing at once when it is gone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Final

from tether.aio import cancel_and_wait
from tether.store.base import LeaseNotFound, Store, StoreError

RETRY_S: Final = 0.05
"""Pause before a failed renewal is sent again."""

_log = logging.getLogger(__name__)


class LeaseKeeper:
    """Grants a lease and renews it every third of its TTL until stopped.

    `lost` is set when the lease is gone: the store says it expired, or no renewal has succeeded
    for a whole TTL (the store may already have expired it). Whoever holds keys on the lease must
    then stop acting on them: a scheduler leader steps down, an agent re-registers.
    """

    def __init__(
        self,
        store: Store,
        ttl_s: int,
        renewed: Callable[[int, float], None] | None = None,
    ) -> None:
        """`renewed(lease, renewed_at)` is called after every successful renewal."""
        if ttl_s < 1:
            raise ValueError(f"lease TTL must be at least 1 second, got {ttl_s}")
        self._store = store
        self.ttl_s = ttl_s
        self.lease = 0
        self.renewed_at = 0.0
        """When (monotonic) the last successful grant or renewal was sent: the store keeps the
        lease for at least a TTL from then."""
        self.lost = asyncio.Event()
        self._renewed = renewed
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Grants the lease and starts renewing it; returns the lease id."""
        sent_at = time.monotonic()
        self.lease = await self._store.lease_grant(self.ttl_s)
        self.renewed_at = sent_at
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
        pause = self.ttl_s / 3
        while True:
            await asyncio.sleep(pause)
            sent_at = time.monotonic()
            try:
                async with asyncio.timeout(self.ttl_s / 3):
                    await self._store.lease_keepalive(self.lease)
                pause = self.ttl_s / 3
                self.renewed_at = sent_at
                if self._renewed is not None:
                    self._renewed(self.lease, sent_at)
            except LeaseNotFound:
                _log.warning("lease %x expired", self.lease)
                self.lost.set()
                return
            except (StoreError, TimeoutError) as error:
                if time.monotonic() - self.renewed_at >= self.ttl_s:
                    _log.warning("lease %x not renewed for %ss: %s", self.lease, self.ttl_s, error)
                    self.lost.set()
                    return
                if pause != RETRY_S:
                    _log.info("lease %x renewal failed, retrying: %s", self.lease, error)
                # Soon, not a third of the TTL later: a renewal fails when the store client left
                # a member that stopped answering, and the lease has only the rest of its TTL.
                pause = RETRY_S
