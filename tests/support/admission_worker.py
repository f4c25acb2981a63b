"""A separate process running an admission decider for shard `SHARD` until it is told to stop:
`URL SHARD NAME PAUSE_S`. Its leader fence is a key of its own, so two of them decide for the
same trees at once, as two leaders would if fencing failed: only the quota ledger keeps them
honest. It waits `PAUSE_S` between deciding and writing, as a leader that stalls (a GC pause, a
slow disk) would, so its decisions are made on views others have moved past. Once stdin
closes it prints how many of its writes lost a race."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tether import metrics
from tether.aio import cancel_and_wait
from tether.config import TlsSettings
from tether.model import RegionConfig, from_json
from tether.scheduler.admission.decider import Decider
from tether.scheduler.admission.queues import Decision
from tether.scheduler.allocator_client import AllocatorClient, PreemptionCheck
from tether.scheduler.state import ShardState
from tether.store import Store, keys, open_store
from tether.store.election import Fence


class StallingDecider(Decider):
    """A decider that waits between deciding and writing: `pause_s`, or, once a test has set
    `hold`, until that is set. `decided` is set when it has decided and waits to write."""

    def __init__(self, *args: Any, pause_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pause_s = pause_s
        self.hold: asyncio.Event | None = None
        self.decided = asyncio.Event()

    async def _write(self, decisions: list[Decision], seen: Mapping[str, int]) -> None:
        self.decided.set()
        if self.hold is None:
            await asyncio.sleep(self.pause_s)
        else:
            await self.hold.wait()
        await super()._write(decisions, seen)


async def start_decider(
    store: Store,
    shard: str,
    name: str,
    pause_s: float,
    allocator: PreemptionCheck | None = None,
) -> tuple[ShardState, StallingDecider]:
    """A decider for `shard` fenced by a key of its own, its mirrors loaded; `allocator` checks
    its preemptions (by default a client of allocators that are never started: a preemption
    waits)."""
    kv = await store.get(keys.region_config())
    assert kv is not None, "the region config is missing"
    region = from_json(RegionConfig, kv.value, stored=True)
    fence = Fence(keys.ROOT + f"test-fences/{name}", name.encode())
    await store.put(fence.key, fence.value)
    deciders: list[StallingDecider] = []
    state = ShardState(
        store,
        shard,
        lambda handle, _task: deciders[0].touch(handle),
        fencing_s=region.fencing_s,
        reshaped=lambda: deciders[0].reshaped(),
    )
    identity = f"{name}:{datetime.now(UTC)}"
    deciders.append(
        StallingDecider(
            store,
            state,
            fence,
            identity,
            1001,
            # Never started: the race admits within quota, and a preemption would wait.
            allocator or AllocatorClient(store, timeout_s=5.0, tls=TlsSettings()),
            interval_s=0.2,
            pause_s=pause_s,
        )
    )
    await state.start()
    return state, deciders[0]


async def decide(url: str, shard: str, name: str, pause_s: float) -> int:
    async with open_store(url) as store:
        state, decider = await start_decider(store, shard, name, pause_s)
        running = asyncio.create_task(decider.run())
        print("ready", flush=True)
        # The test closes stdin to stop us.
        await asyncio.to_thread(sys.stdin.read)
        await cancel_and_wait(running)
        await state.stop()
        return int(metrics.ADMISSION_WRITES.labels("conflict")._value.get())


if __name__ == "__main__":
    print(asyncio.run(decide(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))))
