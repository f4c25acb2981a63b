"""The shared asyncio helpers: stopping background tasks, racing coroutines, and loops that run
every N seconds."""

from __future__ import annotations

import asyncio

import pytest

from tether.aio import Periodic, cancel_and_wait, every, first_of, wait_set


async def sleeper(name: str, finished: list[str]) -> None:
    """Sleeps until cancelled; notes `name` in `finished` as it ends."""
    try:
        await asyncio.sleep(3600)
    finally:
        finished.append(name)


async def test_cancel_and_wait_stops_every_task_and_skips_none() -> None:
    finished: list[str] = []
    tasks = [asyncio.create_task(sleeper(name, finished)) for name in ("a", "b")]
    await asyncio.sleep(0)
    await cancel_and_wait(tasks[0], None, tasks[1])
    assert sorted(finished) == ["a", "b"]
    assert all(task.cancelled() for task in tasks)


async def test_cancel_and_wait_cancels_all_before_awaiting_any() -> None:
    """A task that takes a while to finish does not keep the others running meanwhile."""
    order: list[str] = []

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            order.append("slow cancelled")
            await asyncio.shield(asyncio.sleep(0.05))
            order.append("slow done")

    async def quick() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            order.append("quick cancelled")

    slow, fast = asyncio.create_task(slow_to_stop()), asyncio.create_task(quick())
    await asyncio.sleep(0)
    await cancel_and_wait(slow, fast)
    assert order.index("quick cancelled") < order.index("slow done")


async def test_every_waits_then_runs_each_interval_as_asked_before_each_wait() -> None:
    runs: list[float] = []
    asked: list[int] = []
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def interval() -> float:
        asked.append(len(runs))
        return 0.01

    async def action() -> None:
        runs.append(loop.time())
        if len(runs) == 3:
            done.set()

    started = loop.time()
    task = asyncio.create_task(every(interval, action))
    await asyncio.wait_for(done.wait(), 5)
    await cancel_and_wait(task)
    assert runs[0] - started >= 0.01  # the first run comes after one interval
    assert asked[:3] == [0, 1, 2]


async def test_periodic_starts_once_and_stops() -> None:
    runs = 0
    ran = asyncio.Event()
    wake = asyncio.Event()

    async def action() -> None:
        nonlocal runs
        runs += 1
        ran.set()

    # An hour's interval: only `wake` makes it run, so nothing here depends on timing.
    periodic = Periodic("counting", 3600, action, wake=wake)
    periodic.start()
    periodic.start()  # a second start changes nothing: a second loop would also run
    wake.set()
    await asyncio.wait_for(ran.wait(), 5)
    for _ in range(10):
        await asyncio.sleep(0)
    assert runs == 1
    await periodic.stop()
    wake.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert runs == 1
    await periodic.stop()  # stopping twice is fine


async def test_every_now_runs_once_before_the_first_wait() -> None:
    ran = asyncio.Event()

    async def action() -> None:
        ran.set()

    # An hour's interval: only the run before the first wait can set the event.
    task = asyncio.create_task(every(3600, action, now=True))
    await asyncio.wait_for(ran.wait(), 5)
    await cancel_and_wait(task)


async def test_wait_set_says_whether_the_event_was_set_before_the_timeout() -> None:
    event = asyncio.Event()
    assert not await wait_set(event, 0.01)
    asyncio.get_running_loop().call_soon(event.set)
    assert await wait_set(event, 10)
    assert event.is_set()  # it is the caller's to clear


async def test_first_of_says_which_finished_and_stops_the_others() -> None:
    released = asyncio.Event()
    stopped: list[str] = []
    assert await first_of(sleeper("forever", stopped), released.wait(), asyncio.sleep(0)) == 2
    assert stopped == ["forever"]  # cancelled and waited for before first_of returned


async def test_first_of_raises_the_error_of_the_one_that_ended() -> None:
    async def fails() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await first_of(asyncio.sleep(3600), fails())
