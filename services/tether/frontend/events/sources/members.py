"""Who may see each entitlement's events (its members; admins see all). No events of its own."""

from __future__ import annotations

from tether.frontend.events.sources.base import Change, Source, read
from tether.model import Entitlement
from tether.model.event import RegionEvent
from tether.store import KeyValue, keys


class Members(Source[frozenset[str]]):
    prefix = keys.ENTITLEMENTS

    def digest(self, kv: KeyValue) -> frozenset[str] | None:
        entitlement = read(Entitlement, kv)
        return None if entitlement is None else frozenset(entitlement.members)

    def events(
        self,
        key: str,
        before: frozenset[str] | None,
        after: frozenset[str] | None,
        change: Change,
    ) -> list[RegionEvent]:
        return []
