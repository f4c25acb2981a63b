"""Every scheduler test runs in a region whose config lists the shards its replicas serve."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tether.model import RegionConfig, to_json
from tether.store import Store, keys

SHARDS = ["shard-0", "shard-1"]


@pytest.fixture(autouse=True)
async def region_config(store: Store) -> RegionConfig:
    """A replica waits until its shard is in the region config, as an added shard does."""
    config = RegionConfig(name="test", shards=SHARDS, created_at=datetime.now(UTC))
    await store.put(keys.region_config(), to_json(config))
    return config
