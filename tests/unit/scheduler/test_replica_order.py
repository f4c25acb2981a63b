"""Which allocator replica a Place or Release for an entitlement goes to first."""

from __future__ import annotations

from collections import Counter

from tether.scheduler.allocator_client import replica_order

REPLICAS = ["alloc-0", "alloc-1", "alloc-2", "alloc-3"]
ENTITLEMENTS = [f"team-{n:02}" for n in range(400)]


def test_every_replica_is_tried_once_and_the_order_is_stable() -> None:
    for entitlement in ENTITLEMENTS[:20]:
        order = replica_order(entitlement, REPLICAS)
        assert sorted(order) == REPLICAS
        assert replica_order(entitlement, reversed(REPLICAS)) == order


def test_entitlements_spread_over_the_replicas() -> None:
    homes = Counter(replica_order(entitlement, REPLICAS)[0] for entitlement in ENTITLEMENTS)
    assert set(homes) == set(REPLICAS)
    # 100 each on average; far from it would mean one replica serves most of the region.
    assert all(60 <= homes[replica] <= 140 for replica in REPLICAS), homes


def test_a_replica_leaving_moves_only_its_own_entitlements() -> None:
    before = {e: replica_order(e, REPLICAS)[0] for e in ENTITLEMENTS}
    after = {e: replica_order(e, REPLICAS[:-1])[0] for e in ENTITLEMENTS}
    moved = {e for e in ENTITLEMENTS if before[e] != after[e]}
    assert moved == {e for e in ENTITLEMENTS if before[e] == REPLICAS[-1]}
    # They go to the replica that was second for them.
    assert all(after[e] == replica_order(e, REPLICAS)[1] for e in moved)
