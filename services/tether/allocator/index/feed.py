"""Feeding the index from the store: a sink per prefix that applies listings and watch events
key by key (or a listing's page at once) and drops what a new listing no longer holds."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from tether.store import KeyValue, keys

if TYPE_CHECKING:
    from tether.allocator.index.index import AllocationIndex

Apply = Callable[[str, KeyValue | None, int], None]
"""Applies one key's current value: (key after the prefix, value or None, revision)."""


class Sink:
    """Feeds one prefix of the store into the index, key by key or a page at a time."""

    def __init__(
        self,
        prefix: str,
        apply: Apply,
        present: Callable[[], Iterable[str]],
        apply_page: Callable[[Sequence[KeyValue]], None] | None = None,
    ) -> None:
        self._start = len(prefix)
        self._apply = apply
        self._present = present
        self._apply_page = apply_page
        self._listed: set[str] | None = None
        """Keys seen by the listing under way (None: following the watch)."""

    def begin_listing(self) -> None:
        self._listed = set()

    def put(self, kv: KeyValue) -> None:
        self._apply(kv.key[self._start :], kv, kv.mod_revision)

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        if self._listed is not None:
            start = self._start
            self._listed.update(kv.key[start:] for kv in kvs)
        if self._apply_page is not None:
            self._apply_page(kvs)
        else:
            for kv in kvs:
                self.put(kv)

    def delete(self, key: str, revision: int) -> None:
        self._apply(key[self._start :], None, revision)

    def end_listing(self, revision: int) -> None:
        listed = self._listed or set()
        gone = [name for name in self._present() if name not in listed]
        for name in gone:
            self._apply(name, None, revision)
        self._listed = None


def sinks(index: AllocationIndex) -> dict[str, Sink]:
    """A feed sink per prefix the index is built from."""
    return {
        keys.ENTITLEMENTS: Sink(
            keys.ENTITLEMENTS,
            lambda name, kv, _: index.set_entitlement(name, None if kv is None else kv.value),
            index.entitlement_names,
        ),
        keys.MACHINES: Sink(
            keys.MACHINES,
            lambda machine_id, kv, _: index.set_machine(
                machine_id, None if kv is None else kv.value
            ),
            index.machines_present,
            lambda kvs: index.set_machines([(keys.last_segment(kv.key), kv.value) for kv in kvs]),
        ),
        keys.ALLOCATIONS: Sink(
            keys.ALLOCATIONS, index.set_allocation, index.records_present, index.set_allocations
        ),
        keys.EPHEMERAL_RESOURCES: Sink(
            keys.EPHEMERAL_RESOURCES,
            lambda name, kv, revision: index.set_ephemeral(
                name, None if kv is None else kv.value, revision
            ),
            index.ephemeral_names,
        ),
    }
