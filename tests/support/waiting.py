"""Waiting in async tests for something observable, polled until it holds or time runs out."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


def _present(value: object) -> bool:
    return value is not None and value is not False


@overload
async def eventually(
    read: Callable[[], Awaitable[T | None]],
    *,
    timeout_s: float = ...,
    what: str = ...,
    interval_s: float = ...,
) -> T: ...


@overload
async def eventually(
    read: Callable[[], Awaitable[T]],
    predicate: Callable[[T], bool],
    *,
    timeout_s: float = ...,
    what: str = ...,
    interval_s: float = ...,
) -> T: ...


@overload
async def eventually(
    read: Callable[[], T | None],
    *,
    timeout_s: float = ...,
    what: str = ...,
    interval_s: float = ...,
) -> T: ...


@overload
async def eventually(
    read: Callable[[], T],
    predicate: Callable[[T], bool],
    *,
    timeout_s: float = ...,
    what: str = ...,
    interval_s: float = ...,
) -> T: ...


async def eventually(
    read: Callable[[], Any],
    predicate: Callable[[Any], bool] = _present,
    *,
    timeout_s: float = 10.0,
    what: str = "the condition",
    interval_s: float = 0.05,
) -> Any:
    """Polls `read()` (a coroutine function or a plain one) until `predicate` holds for its
    result, by default until it is neither None nor False; returns that result, or fails
    naming `what` and the last result."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = read()
        if inspect.isawaitable(value):
            value = await value
        if predicate(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}: {value!r}")
        await asyncio.sleep(interval_s)
