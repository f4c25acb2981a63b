"""The shard map: an entitlement moved to another scheduler shard."""

from __future__ import annotations

from tether.frontend.events.sources.base import Change, Source
from tether.model.event import EventKind, RegionEvent, RegionObject
from tether.store import KeyValue, keys


class Shards(Source[str]):
    prefix = keys.SHARD_MAP

    def digest(self, kv: KeyValue) -> str | None:
        return kv.value.decode(errors="replace") or None

    def state(self, key: str, digest: str) -> RegionObject:
        return RegionObject(what="shard", entitlement=self.name(key), shard=digest)

    def events(
        self, key: str, before: str | None, after: str | None, change: Change
    ) -> list[RegionEvent]:
        if before is None or after is None or before == after:
            return []
        return [
            change.event(
                EventKind.SHARD_MOVED,
                entitlement=self.name(key),
                shard=after,
                detail=f"from {before}",
            )
        ]
