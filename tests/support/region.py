"""A region's config in a test's store, as `tether up` creates it: services refuse a store
without one."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from tether.model import DEFAULT_FENCING_S, RegionConfig, to_json
from tether.store import Store, keys


async def create_region(
    store: Store, shards: Sequence[str] = ("shard-0",), *, fencing_s: float = DEFAULT_FENCING_S
) -> RegionConfig:
    config = RegionConfig(
        name="test", shards=list(shards), fencing_s=fencing_s, created_at=datetime.now(UTC)
    )
    await store.put(keys.region_config(), to_json(config))
    return config
