"""Which entitlement each machine belongs to (its allocation record): the owner of the machine's
events. No events of its own."""

from __future__ import annotations

from tether.frontend.events.sources.base import Change, Source, read
from tether.model import Allocation
from tether.model.event import RegionEvent
from tether.store import KeyValue, keys

FREE_POOL = ""


class Owners(Source[str]):
    prefix = keys.ALLOCATIONS

    def digest(self, kv: KeyValue) -> str | None:
        if "/" in self.name(kv.key):
            return None  # an allocation entry (one task's resources), not the machine's record
        allocation = read(Allocation, kv)
        if allocation is None:
            return None
        return allocation.entitlement or FREE_POOL

    def events(
        self, key: str, before: str | None, after: str | None, change: Change
    ) -> list[RegionEvent]:
        return []
