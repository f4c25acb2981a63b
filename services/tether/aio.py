"""Asyncio helpers every layer shares (the store's background tasks and the services')."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancels `task` (None: nothing to do) and returns once it has finished; the
    cancellation it ends with is not an error."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
