"""The agent's heartbeat: its machine's record on a lease the agent keeps alive, put again on a
new lease whenever the old one is lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from tether.model import AgentHeartbeat, to_json
from tether.store import Store, StoreError, keys
from tether.store.lease import LeaseKeeper

_log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_S: Final = 0.5
"""Pause before asking the store again after it failed."""


class Registration:
    """The heartbeat `heartbeat()` makes, on a lease of `ttl_s` whose renewals go to
    `on_renewed(lease, renewed_at)`; `keeper` keeps the current lease (None before
    `register`)."""

    def __init__(
        self,
        store: Store,
        ttl_s: int,
        heartbeat: Callable[[], AgentHeartbeat],
        on_renewed: Callable[[int, float], None],
    ) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._heartbeat = heartbeat
        self._on_renewed = on_renewed
        self.keeper: LeaseKeeper | None = None

    async def register(self) -> None:
        """Grants a lease and puts the heartbeat on it."""
        keeper = LeaseKeeper(self._store, self._ttl_s, self._on_renewed)
        lease = await keeper.start()
        try:
            await self._put(lease)
        except BaseException:
            await keeper.stop(revoke=True)
            raise
        self.keeper = keeper

    async def announce(self) -> None:
        """Puts the heartbeat again, as it is now, on the current lease; once that is lost,
        registering again puts it."""
        while True:
            keeper = self.keeper
            assert keeper is not None
            try:
                await self._put(keeper.lease)
                return
            except StoreError as error:
                if keeper.lost.is_set():
                    return
                _log.warning("cannot put the heartbeat: %s; retrying", error)
                await asyncio.sleep(RETRY_S)

    async def stay(self, registered: Callable[[], Awaitable[None]]) -> None:
        """Registers again whenever the lease is lost, then awaits `registered()`; runs until
        cancelled."""
        while True:
            assert self.keeper is not None
            await self.keeper.lost.wait()
            _log.warning("heartbeat lease lost; registering again")
            await self.keeper.stop(revoke=False)
            await retried("register", self.register)
            await registered()

    async def stop(self) -> None:
        """Ends the lease: the heartbeat vanishes at once."""
        if self.keeper is not None:
            await self.keeper.stop(revoke=True)

    async def _put(self, lease: int) -> None:
        heartbeat = self._heartbeat()
        await self._store.put(keys.heartbeat(heartbeat.machine.id), to_json(heartbeat), lease=lease)


async def retried(what: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, asked again until the store answers; each failure is logged as `cannot
    <what>`."""
    while True:
        try:
            return await call()
        except StoreError as error:
            _log.warning("cannot %s: %s; retrying", what, error)
            await asyncio.sleep(RETRY_S)
