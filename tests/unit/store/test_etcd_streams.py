"""A step of an etcd stream call (`on_stream`): a dropped call is a store error, a task cancelled
from outside stays cancelled, whether or not its call was dropped meanwhile; and which of etcd's
refusals are the store being unavailable (`translate`)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tether.store.base import StoreError, StoreUnavailable
from tether.store.etcd_streams import on_stream, translate


async def stepping(step: asyncio.Future[None], dropped: bool) -> asyncio.Task[None]:
    """A task awaiting `step` through `on_stream`, once it waits."""
    task = asyncio.create_task(on_stream(step, lambda: dropped))
    await asyncio.sleep(0)
    assert not task.done()
    return task


async def test_a_dropped_call_is_a_store_error() -> None:
    step = asyncio.get_running_loop().create_future()
    task = await stepping(step, dropped=True)
    step.cancel()  # what gRPC does to the step of a call it cancels
    with pytest.raises(StoreUnavailable, match="dropped"):
        await task


async def test_a_task_cancelled_from_outside_stays_cancelled_when_its_call_was_dropped() -> None:
    step = asyncio.get_running_loop().create_future()
    task = await stepping(step, dropped=True)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_a_cancelled_step_of_a_call_not_dropped_is_a_cancellation() -> None:
    step = asyncio.get_running_loop().create_future()
    task = await stepping(step, dropped=False)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def _refusal(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details, None)


def test_an_overloaded_etcd_is_unavailable_and_a_wrong_request_is_not() -> None:
    # Unavailable: services retry, and the frontend answers 503 rather than 500.
    busy = _refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "etcdserver: too many requests")
    assert type(translate(busy, "Txn")) is StoreUnavailable
    # A message over gRPC's limit is RESOURCE_EXHAUSTED too, and trying again cannot help.
    too_big = _refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "received message larger than max")
    assert type(translate(too_big, "Txn")) is StoreError
