"""Operating scheduler shards in a running region (`tether up`): add a shard, move an
entitlement to it, fail its leader over and drain the old one, while tasks keep running.

The tests share one region and run in file order: each builds on the shard map the one before
left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.faults import pids_by_index
from tests.support.harness import (
    FAST_TIMINGS,
    LocalRegion,
    all_running,
    get_json,
    sleeper_job,
    wait_for,
)
from tether.model import shard_for
from tether.region.plan import SHARDS

NEW_SHARD = "shard-9"
HOME = shard_for("default", list(SHARDS))
"""Where the bootstrap put the default entitlement."""


@pytest.fixture(scope="module")
def client(region: LocalRegion) -> Iterator[httpx.Client]:
    with region.client() as opened:
        yield opened


@pytest.fixture(scope="module")
def new_replicas(region: LocalRegion) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two replicas of a shard the region does not have yet, as an operator would start them."""
    started = []
    # A 15 s lease: nothing here waits one out (a failover deletes the leader key), and a
    # loaded machine's stall must not elect anew between the test's views of the shard.
    env = {**os.environ, **FAST_TIMINGS, "TETHER_SCHEDULER_LEASE_TTL_S": "15"}
    command = [sys.executable, "-m", "tether.cli.main", "scheduler", "--shard", NEW_SHARD]
    for replica in "ab":
        log = region.state_dir / "logs" / f"scheduler-{NEW_SHARD}-{replica}.log"
        with log.open("ab") as output:
            started.append(
                subprocess.Popen(
                    [*command, "--store", region.store_url()],
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        yield started
    finally:
        for process in started:
            process.kill()
            process.wait(10)


def shard(client: httpx.Client, shard_id: str) -> dict[str, Any]:
    shards = get_json(client, "/admin/shards")["shards"]
    return next(s for s in shards if s["shard"] == shard_id)


def scale(client: httpx.Client, handle: str, count: int) -> None:
    response = client.post(f"/v1/jobs/{handle}/scale", json={"count": count})
    assert response.status_code == 200, response.text


def test_an_added_shard_takes_an_entitlement_without_restarting_its_tasks(
    region: LocalRegion, client: httpx.Client, new_replicas: list[subprocess.Popen[bytes]]
) -> None:
    submitted = client.post("/v1/jobs", json=sleeper_job("moving", 2))
    assert submitted.status_code == 201, submitted.text
    handle = "default/moving"
    wait_for(lambda: all_running(client, handle, 2), timeout_s=60, what="2 running tasks")
    before = pids_by_index(client, handle)

    # The replicas wait for the shard to be added, then elect a leader.
    assert shard_ids(client) == list(SHARDS)
    added = region.cli("shard", "add", NEW_SHARD)
    assert added.returncode == 0, added.stderr
    leader = wait_for(
        lambda: shard(client, NEW_SHARD)["leader_pid"], timeout_s=20, what="the new shard's leader"
    )
    assert leader in {process.pid for process in new_replicas}

    moved = region.cli("shard", "move", HOME, "--entitlement", "default", "--to", NEW_SHARD)
    assert moved.returncode == 0, moved.stderr
    assert f"moved from {HOME} to {NEW_SHARD}" in moved.stdout
    assert shard(client, NEW_SHARD)["entitlements"] == ["default"]

    # The old shard's replicas die for good: only the new shard can place the next task.
    for name, pid in region.service_pids().items():
        if name.startswith(f"scheduler-{HOME}-"):
            os.kill(pid, signal.SIGKILL)
    scale(client, handle, 3)
    wait_for(lambda: all_running(client, handle, 3), timeout_s=30, what="the third task")
    after = pids_by_index(client, handle)
    assert {index: after[index] for index in before} == before


def shard_ids(client: httpx.Client) -> list[str]:
    return [s["shard"] for s in get_json(client, "/admin/shards")["shards"]]


def test_failover_hands_the_shard_to_its_standby_and_tasks_keep_running(
    region: LocalRegion, client: httpx.Client, new_replicas: list[subprocess.Popen[bytes]]
) -> None:
    handle = "default/moving"
    before = pids_by_index(client, handle)
    view = wait_for(
        lambda: (s := shard(client, NEW_SHARD))["standbys"] and s,
        timeout_s=20,
        what="a standby of the new shard",
    )
    failed_over = region.cli("shard", "failover", NEW_SHARD)
    assert failed_over.returncode == 0, failed_over.stderr
    assert f"deposed {view['leader']}" in failed_over.stdout
    after = shard(client, NEW_SHARD)
    assert after["leader"] == view["standbys"][0]["identity"]
    assert after["leader_pid"] != view["leader_pid"]

    # The new leader decides for the job: it places a fourth task; the others run on.
    scale(client, handle, 4)
    wait_for(lambda: all_running(client, handle, 4), timeout_s=30, what="the fourth task")
    now = pids_by_index(client, handle)
    assert {index: now[index] for index in before} == before


def test_draining_a_shard_moves_its_entitlements_away(
    region: LocalRegion, client: httpx.Client, new_replicas: list[subprocess.Popen[bytes]]
) -> None:
    handle = "default/moving"
    before = pids_by_index(client, handle)
    other = next(s for s in SHARDS if s != HOME)
    drained = region.cli("shard", "drain", NEW_SHARD)
    assert drained.returncode == 0, drained.stderr
    assert f"default: moved from {NEW_SHARD} to {other}" in drained.stdout
    assert shard(client, NEW_SHARD)["draining"] is True
    listed = region.cli("shard", "ls", "-o", "wide")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if NEW_SHARD in line)
    assert "none" not in row  # its replicas still run: a leader and a standby
    # The home shard has no replicas left (no leader), so the drain chose the other one.
    scale(client, handle, 2)
    wait_for(lambda: all_running(client, handle, 2), timeout_s=30, what="the job scaled down")
    now = pids_by_index(client, handle)
    assert now == {index: before[index] for index in (0, 1)}
