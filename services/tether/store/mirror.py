"""A local copy of every key under a prefix, kept fresh by a watch (list, then watch)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from tether.store.base import CompactedError, EventType, KeyValue, Store, StoreError

_log = logging.getLogger(__name__)

ChangeHandler = Callable[[set[str]], Awaitable[None]]
"""Called with the keys that changed (put or deleted) after each batch of changes is applied."""

_PAGE = 1000
_RETRY_S = 0.5


class PrefixMirror:
    """Every key under `prefix`, as of `revision`, in `items`.

    `start()` lists the prefix (paged, one snapshot) and then follows a watch from the next
    revision. When the watch's history has been compacted it lists again, and reports every key
    that changed in between, deletions included. `on_change` runs after each revision is applied,
    with the mirror already up to date.
    """

    def __init__(self, store: Store, prefix: str, on_change: ChangeHandler | None = None) -> None:
        self._store = store
        self.prefix = prefix
        self._on_change = on_change
        self.items: dict[str, KeyValue] = {}
        self.revision = 0
        self._advanced = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Loads the prefix; returns once `items` holds a consistent snapshot."""
        await self._relist()
        self._task = asyncio.create_task(self._follow(), name=f"mirror {self.prefix}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def wait_for(self, revision: int) -> None:
        """Returns once the mirror has applied every change up to `revision`."""
        async with self._advanced:
            await self._advanced.wait_for(lambda: self.revision >= revision)

    async def _relist(self) -> set[str]:
        items: dict[str, KeyValue] = {}
        start_after: str | None = None
        revision = 0
        while True:
            page = await self._store.range(
                self.prefix, start_after=start_after, limit=_PAGE, revision=revision
            )
            revision = page.revision
            items.update((kv.key, kv) for kv in page.kvs)
            if not page.more or not page.kvs:
                break
            start_after = page.kvs[-1].key
        changed = {
            key
            for key in items.keys() | self.items.keys()
            if key not in items
            or key not in self.items
            or items[key].mod_revision != self.items[key].mod_revision
        }
        self.items = items
        await self._advance(revision)
        return changed

    async def _advance(self, revision: int) -> None:
        async with self._advanced:
            self.revision = max(self.revision, revision)
            self._advanced.notify_all()

    async def _follow(self) -> None:
        while True:
            try:
                async with self._store.watch(
                    self.prefix, start_revision=self.revision + 1
                ) as watch:
                    async for events in watch:
                        for event in events:
                            if event.type is EventType.PUT:
                                self.items[event.kv.key] = event.kv
                            else:
                                self.items.pop(event.kv.key, None)
                        await self._advance(events[-1].revision)
                        await self._notify({event.kv.key for event in events})
            except CompactedError:
                _log.info("watch on %s compacted; listing again", self.prefix)
                await self._notify(await self._relisted())
            except StoreError as error:
                _log.warning("watch on %s failed, retrying: %s", self.prefix, error)
                await asyncio.sleep(_RETRY_S)

    async def _relisted(self) -> set[str]:
        while True:
            try:
                return await self._relist()
            except StoreError as error:
                _log.warning("listing %s failed, retrying: %s", self.prefix, error)
                await asyncio.sleep(_RETRY_S)

    async def _notify(self, keys: set[str]) -> None:
        if self._on_change is not None and keys:
            await self._on_change(keys)
