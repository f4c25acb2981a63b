"""Every scheduler test runs in a region whose config lists the shards its replicas serve; a
fake allocator serves those that place tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.integration.scheduler.fake_allocator import FakeAllocator, serve_fake_allocator
from tests.support.region import create_region
from tether.model import RegionConfig
from tether.store import Store

SHARDS = ["shard-0", "shard-1"]


@pytest.fixture(autouse=True)
async def region_config(store: Store) -> RegionConfig:
    """A replica waits until its shard is in the region config, as an added shard does."""
    return await create_region(store, SHARDS)


@pytest.fixture
async def allocator(store: Store) -> AsyncIterator[FakeAllocator]:
    async with serve_fake_allocator(store) as fake:
        yield fake
