"""A local copy of every key under a prefix, kept fresh by a watch (a feed that keeps it all)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from tether.store.base import KeyValue, Store
from tether.store.feed import PrefixFeed

ChangeHandler = Callable[[set[str]], Awaitable[None]]
"""Called with the keys that changed (put or deleted) after each batch of changes is applied."""


class PrefixMirror:
    """Every key under `prefix`, as of `revision`, in `items`.

    `start()` lists the prefix (paged, one snapshot) and then follows a watch from the next
    revision. When the watch's history has been compacted it lists again, and reports every key
    that changed in between, deletions included. `on_change` runs after each revision is applied,
    with the mirror already up to date.
    """

    def __init__(self, store: Store, prefix: str, on_change: ChangeHandler | None = None) -> None:
        self.prefix = prefix
        self._on_change = on_change
        self.items: dict[str, KeyValue] = {}
        self._listing: dict[str, KeyValue] = {}
        self._changed: set[str] = set()
        self._feed = PrefixFeed(store, prefix, self, after=self._notify)

    @property
    def revision(self) -> int:
        return self._feed.revision

    async def start(self) -> None:
        """Loads the prefix; returns once `items` holds a consistent snapshot."""
        await self._feed.start()
        # The first listing is the starting point, not a change.
        self._changed.clear()

    async def stop(self) -> None:
        await self._feed.stop()

    async def wait_for(self, revision: int) -> None:
        """Returns once the mirror has applied every change up to `revision`."""
        await self._feed.wait_for(revision)

    # --- FeedSink ----------------------------------------------------------------------------

    def begin_listing(self) -> None:
        self._listing = {}

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        self._listing.update((kv.key, kv) for kv in kvs)

    def end_listing(self, revision: int) -> None:
        listed, held = self._listing, self.items
        self._changed |= {
            key
            for key in listed.keys() | held.keys()
            if key not in listed
            or key not in held
            or listed[key].mod_revision != held[key].mod_revision
        }
        self.items, self._listing = listed, {}

    def put(self, kv: KeyValue) -> None:
        self.items[kv.key] = kv
        self._changed.add(kv.key)

    def delete(self, key: str, revision: int) -> None:
        self.items.pop(key, None)
        self._changed.add(key)

    async def _notify(self) -> None:
        changed, self._changed = self._changed, set()
        if self._on_change is not None and changed:
            await self._on_change(changed)
