"""The broker as the integration tests run it: a broker of dc1 on its own connection to the
store (a fixture; a test module imports it by name)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.waiting import eventually
from tether.broker.service import Broker
from tether.broker.settings import BrokerSettings
from tether.store import open_store

TIMEOUT_S = 5.0
"""How long a test waits for the broker to act on a heartbeat or a notice."""


@pytest.fixture
async def broker(store_url: str) -> AsyncIterator[Broker]:
    """A broker of dc1 on its own connection to the store, as if it were its own process."""
    service = Broker(open_store(store_url), BrokerSettings(dc="dc1"))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


async def handled(broker: Broker, revision: int) -> None:
    """Waits until the broker has handled every heartbeat up to `revision`."""
    await eventually(
        lambda: broker.heartbeats_handled,
        lambda handled: handled >= revision,
        timeout_s=TIMEOUT_S,
        what=f"the broker to handle the heartbeats up to revision {revision}",
    )
