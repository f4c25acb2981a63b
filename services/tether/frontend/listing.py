"""Waiting for a frontend's first listing of a part of the store, which some requests are
answered from (the shards' counts, the queues' order), before answering 503."""

from __future__ import annotations

import asyncio
import time

from tether.frontend.problems import Unavailable


async def wait_listed(listed: asyncio.Event, wait_s: float, started_at: float, what: str) -> None:
    """Returns once `listed` is set; 503 naming `what` is being listed if that takes over
    `wait_s` (`started_at`: when the listing began, by the monotonic clock)."""
    if listed.is_set():
        return
    try:
        async with asyncio.timeout(wait_s):
            await listed.wait()
    except TimeoutError:
        since = time.monotonic() - started_at
        raise Unavailable(
            f"this frontend is still listing {what} (for {since:.0f} s so far); try again shortly"
        ) from None
