"""The health checker, running in-process on each store, follows real heartbeat leases."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from tests.support.machines import heartbeating, make_machine, read_machine
from tests.support.waiting import eventually
from tether.health.service import HealthChecker
from tether.health.settings import HealthSettings
from tether.model import Machine, MachineState, to_json
from tether.store import Store, keys, open_store

GRACE_S = 1.0
TIMEOUT_S = 10.0
"""How long a transition may take at most: generous, so that a loaded machine does not fail the
tests; how early it may happen is what they measure."""


@asynccontextmanager
async def checker(store_url: str) -> AsyncIterator[HealthChecker]:
    """A health checker on its own connection to the store, as if it were its own process."""
    service = HealthChecker(
        open_store(store_url), HealthSettings(grace_s=GRACE_S, check_interval_s=0.1)
    )
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


async def record(store: Store, machine: Machine) -> None:
    await store.put(keys.machine(machine.id), to_json(machine))


def in_state(state: MachineState) -> Callable[[Machine | None], bool]:
    return lambda machine: machine is not None and machine.state is state


async def test_a_lapsed_heartbeat_marks_the_machine_down_and_a_new_one_up(
    store: Store, store_url: str
) -> None:
    machine = make_machine("m1", host_profile_current="web")
    await record(store, machine)
    async with checker(store_url), heartbeating(store, machine, ttl_s=1) as agent:
        # The lease may be granted longer than asked (etcd has a minimum): ask it.
        ttl_s = await store.lease_keepalive(agent.lease)
        await agent.stop(revoke=False)
        lapsed_at, lapsed_wall = time.monotonic(), datetime.now(UTC)
        down = await eventually(
            lambda: read_machine(store, "m1"),
            in_state(MachineState.DOWN),
            timeout_s=ttl_s + GRACE_S + TIMEOUT_S,
            what="m1 down",
        )
        assert time.monotonic() - lapsed_at >= GRACE_S
        # When it was marked down: the start of the fencing period of its at-most-once tasks.
        assert down is not None
        assert down.down_since is not None
        assert down.down_since - lapsed_wall >= timedelta(seconds=GRACE_S)
        assert down == machine.model_copy(
            update={"state": MachineState.DOWN, "down_since": down.down_since}
        )

        async with heartbeating(store, machine):
            up = await eventually(
                lambda: read_machine(store, "m1"),
                in_state(MachineState.UP),
                timeout_s=TIMEOUT_S,
                what="m1 up again",
            )
    assert up == machine


async def test_a_revoked_heartbeat_gets_the_grace_period(store: Store, store_url: str) -> None:
    machine = make_machine("m1")
    await record(store, machine)
    async with checker(store_url), heartbeating(store, machine) as agent:
        revoked_at = time.monotonic()  # before: the checker may see it gone before stop() returns
        await agent.stop()
        down = await eventually(
            lambda: read_machine(store, "m1"),
            in_state(MachineState.DOWN),
            timeout_s=GRACE_S + TIMEOUT_S,
            what="m1 down",
        )
        assert time.monotonic() - revoked_at >= GRACE_S
        assert down is not None
        assert down.down_since is not None
        assert down == machine.model_copy(
            update={"state": MachineState.DOWN, "down_since": down.down_since}
        )


async def test_at_start_missing_heartbeats_get_the_grace_and_present_ones_count(
    store: Store, store_url: str
) -> None:
    silent = make_machine("m1")
    draining = make_machine("m2", state=MachineState.DRAINING)
    back = make_machine("m3", state=MachineState.DOWN)
    for machine in (silent, draining, back):
        await record(store, machine)
    async with heartbeating(store, back):
        started_at = time.monotonic()  # before the checker's start: it cannot count from earlier
        async with checker(store_url):
            await eventually(
                lambda: read_machine(store, "m3"),
                in_state(MachineState.UP),
                timeout_s=TIMEOUT_S,
                what="m3 up",
            )
            await eventually(
                lambda: read_machine(store, "m1"),
                in_state(MachineState.DOWN),
                timeout_s=GRACE_S + TIMEOUT_S,
                what="m1 down",
            )
        assert time.monotonic() - started_at >= GRACE_S
        # A drain is not the checker's to undo, heartbeat or not.
        assert await read_machine(store, "m2") == draining
