"""Mirrored records, parsed once when they change: every key under a prefix (`Records`), or only
the keys of chosen entitlements under it (`PartitionedRecords`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Generic, TypeVar

from pydantic import ValidationError

from tether.model import TetherModel, from_json
from tether.scheduler.plan import Stored
from tether.store import KeyValue, Store
from tether.store.mirror import PrefixMirror

_log = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M", bound=TetherModel)

Changed = Callable[[str, Stored[T] | None, Stored[T] | None], None]
"""Called with a key and its old and new record (None: absent or invalid)."""


class Records(Generic[T]):
    """Every key under a prefix, each value parsed once when it changes."""

    def __init__(
        self, store: Store, prefix: str, parse: Callable[[bytes], T], changed: Changed[T]
    ) -> None:
        self._parse = parse
        self._changed = changed
        self.mirror = PrefixMirror(store, prefix, self._keys_changed)
        self.items: dict[str, Stored[T]] = {}

    async def start(self) -> None:
        await self.mirror.start()
        for key in list(self.mirror.items):
            self._apply(key)

    async def stop(self) -> None:
        await self.mirror.stop()

    def forget(self) -> None:
        """Reports every record gone (of a mirror no longer followed)."""
        for key, old in list(self.items.items()):
            del self.items[key]
            self._changed(key, old, None)

    async def _keys_changed(self, changed: set[str]) -> None:
        for key in changed:
            self._apply(key)

    def _apply(self, key: str) -> None:
        kv = self.mirror.items.get(key)
        new = None if kv is None else stored_record(kv, self._parse)
        old = self.items.pop(key, None)
        if new is not None:
            self.items[key] = new
        self._changed(key, old, new)


class PartitionedRecords(Generic[T]):
    """The keys under `prefix` of the entitlements followed, one mirror each
    (`<prefix><entitlement>/`): a shard's leader receives the task traffic of its own jobs, not
    the region's."""

    def __init__(
        self, store: Store, prefix: str, parse: Callable[[bytes], T], changed: Changed[T]
    ) -> None:
        self._store = store
        self._prefix = prefix
        self._parse = parse
        self._changed = changed
        self._parts: dict[str, Records[T]] = {}

    def follows(self, entitlement: str) -> bool:
        return entitlement in self._parts

    async def follow(self, entitlements: Collection[str]) -> set[str]:
        """Follows exactly these entitlements' keys: the records of those no longer followed
        are reported gone, those of the new ones changed once loaded. Returns the new ones."""
        for name in sorted(self._parts.keys() - set(entitlements)):
            part = self._parts.pop(name)
            await part.stop()
            part.forget()
        added = set(entitlements) - self._parts.keys()
        for name in sorted(added):
            part = Records(self._store, f"{self._prefix}{name}/", self._parse, self._changed)
            await part.start()
            self._parts[name] = part
        return added

    async def stop(self) -> None:
        for part in self._parts.values():
            await part.stop()

    def revision(self, entitlement: str) -> int:
        """The store revision the entitlement's records are at (0: not followed)."""
        part = self._parts.get(entitlement)
        return 0 if part is None else part.mirror.revision

    async def wait_for(self, entitlement: str, revision: int) -> None:
        """Returns once the entitlement's records hold every change up to `revision` (at
        once if it is not followed)."""
        part = self._parts.get(entitlement)
        if part is not None:
            await part.mirror.wait_for(revision)


def stored_record(kv: KeyValue, parse: Callable[[bytes], T]) -> Stored[T] | None:
    """The record, or None when it does not parse."""
    try:
        return Stored(parse(kv.value), kv.mod_revision)
    except (ValidationError, ValueError) as error:
        # Someone wrote a record that is not ours to fix: act as if it were absent.
        _log.warning("ignoring invalid record %s: %s", kv.key, error)
        return None


def records_of(kvs: list[KeyValue], parse: Callable[[bytes], M]) -> list[Stored[M]]:
    """The records that parse; the others are skipped, as the mirrors skip them."""
    return [stored for kv in kvs if (stored := stored_record(kv, parse)) is not None]


def parser(model: type[M]) -> Callable[[bytes], M]:
    """Parses a stored record of `model`."""
    return lambda value: from_json(model, value, stored=True)
