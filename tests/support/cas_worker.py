"""A separate process that increments a counter with compare-and-swap: `URL KEY COUNT`."""

from __future__ import annotations

import asyncio
import sys

from tether.store import Put, key_missing, mod_revision_is, open_store


async def increment(url: str, key: str, count: int) -> int:
    """Adds `count` to the integer at `key`; returns how many attempts lost a race."""
    conflicts = 0
    async with open_store(url) as store:
        for _ in range(count):
            while True:
                current = await store.get(key)
                if current is None:
                    guard, value = key_missing(key), 1
                else:
                    guard, value = (
                        mod_revision_is(key, current.mod_revision),
                        int(current.value) + 1,
                    )
                result = await store.txn((guard,), (Put(key, str(value).encode()),))
                if result.succeeded:
                    break
                conflicts += 1
    return conflicts


if __name__ == "__main__":
    url, key, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(asyncio.run(increment(url, key, count)))
