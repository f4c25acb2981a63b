"""LeaseKeeper and PrefixMirror against both real store backends."""

from __future__ import annotations

import asyncio

from tether.store import Store
from tether.store.lease import LeaseKeeper
from tether.store.mirror import PrefixMirror


async def test_kept_lease_outlives_its_ttl_and_revoke_deletes_its_keys(store: Store) -> None:
    # 3 s, not 1: a keepalive more than a TTL late is refused, and a loaded machine can stall
    # the loop for most of a second.
    keeper = LeaseKeeper(store, ttl_s=3)
    lease = await keeper.start()
    await store.put("/t/held", b"x", lease=lease)
    await asyncio.sleep(4)
    assert await store.get("/t/held") is not None
    assert not keeper.lost.is_set()
    await keeper.stop()
    assert keeper.lost.is_set()
    assert await store.get("/t/held") is None


async def test_lost_fires_when_the_lease_is_revoked_elsewhere(store: Store) -> None:
    keeper = LeaseKeeper(store, ttl_s=1)
    lease = await keeper.start()
    await store.lease_revoke(lease)
    await asyncio.wait_for(keeper.lost.wait(), timeout=3)
    await keeper.stop()


async def test_mirror_follows_puts_and_deletes_and_reports_changed_keys(store: Store) -> None:
    await store.put("/m/a", b"1")
    await store.put("/other", b"ignored")
    seen: list[set[str]] = []

    async def on_change(keys: set[str]) -> None:
        seen.append(keys)

    mirror = PrefixMirror(store, "/m/", on_change)
    await mirror.start()
    try:
        assert set(mirror.items) == {"/m/a"}
        await store.put("/m/b", b"2")
        revision = await store.put("/m/a", b"3")
        await asyncio.wait_for(mirror.wait_for(revision), timeout=5)
        assert mirror.items["/m/a"].value == b"3"
        assert mirror.items["/m/b"].value == b"2"
        await store.delete("/m/b")
        await asyncio.wait_for(mirror.wait_for(await store.revision()), timeout=5)
        assert set(mirror.items) == {"/m/a"}
        assert {"/m/b"} in seen
        assert {"/m/a"} in seen
        assert all(key.startswith("/m/") for keys in seen for key in keys)
    finally:
        await mirror.stop()


async def test_mirror_relists_after_compaction_and_reports_what_it_missed(store: Store) -> None:
    await store.put("/m/kept", b"1")
    await store.put("/m/gone", b"1")
    changes: list[set[str]] = []

    async def on_change(keys: set[str]) -> None:
        changes.append(keys)

    mirror = PrefixMirror(store, "/m/", on_change)
    await mirror.start()
    await mirror.stop()  # as if the process slept through the compaction
    await store.delete("/m/gone")
    await store.put("/m/new", b"1")
    await store.compact(await store.revision())
    await mirror.start()  # resumes from the stale revision
    try:
        deadline = asyncio.get_running_loop().time() + 5
        while set(mirror.items) != {"/m/kept", "/m/new"}:
            assert asyncio.get_running_loop().time() < deadline, mirror.items
            await asyncio.sleep(0.05)
        assert {"/m/gone", "/m/new"} <= set().union(*changes)
    finally:
        await mirror.stop()
