"""Asyncio helpers every layer shares (the store's background tasks, the services' and the
scripts'): stopping background tasks, racing coroutines, and a loop that runs every N seconds
until stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    """Cancels every task (None: nothing to do) and returns once all have finished; the
    cancellation they end with is not an error. All are cancelled before any is awaited, so
    one slow to finish does not keep the others running."""
    running = [task for task in tasks if task is not None]
    for task in running:
        task.cancel()
    for task in running:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def first_of(*waits: Coroutine[Any, Any, object]) -> int:
    """Runs the coroutines until the first one finishes, cancels the rest and waits for them,
    re-raises its error; returns its position among `waits`."""
    tasks = [asyncio.create_task(wait) for wait in waits]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
        return min(tasks.index(task) for task in done)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def wait_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Waits until `event` is set, or `timeout_s` passed; whether it is set.

    Not asyncio.wait_for: on Python 3.11 it can swallow a cancellation that arrives as the
    event is set, and a loop around it would then never stop."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()


async def every(
    interval_s: float | Callable[[], float],
    action: Callable[[], Awaitable[object]],
    *,
    wake: asyncio.Event | None = None,
    now: bool = False,
) -> NoReturn:
    """Waits `interval_s` (or what it returns, asked before each wait), runs `action`, and so
    on until cancelled; setting `wake` ends a wait early, and `now` runs `action` once before
    the first wait. `action` handles its own errors: one that escapes ends the loop."""
    if now:
        await action()
    while True:
        pause = interval_s() if callable(interval_s) else interval_s
        if wake is None:
            await asyncio.sleep(pause)
        else:
            await wait_set(wake, pause)
            wake.clear()
        await action()


class Periodic:
    """`every` in a task of its own, from `start()` until `stop()`."""

    def __init__(
        self,
        name: str,
        interval_s: float | Callable[[], float],
        action: Callable[[], Awaitable[object]],
        *,
        wake: asyncio.Event | None = None,
    ) -> None:
        self.name = name
        self._interval_s = interval_s
        self._action = action
        self._wake = wake
        self._task: asyncio.Task[NoReturn] | None = None

    def start(self) -> None:
        if self._task is None:
            looping = every(self._interval_s, self._action, wake=self._wake)
            self._task = asyncio.create_task(looping, name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
