"""The broker's integration tests: a broker of dc1 on its own connection to the store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether.broker.service import Broker
from tether.broker.settings import BrokerSettings
from tether.store import open_store


@pytest.fixture
async def broker(store_url: str) -> AsyncIterator[Broker]:
    """A broker of dc1 on its own connection to the store, as if it were its own process."""
    service = Broker(open_store(store_url), BrokerSettings(dc="dc1"))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
