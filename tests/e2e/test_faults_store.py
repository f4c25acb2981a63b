"""A region on a three-member etcd cluster rides out a dead member and a whole-store outage.

The tests share one region and run in file order: the second starts from the first's jobs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.faults import dead_services, pids_by_index, read_key
from tests.support.harness import (
    FAST_FENCING_S,
    FAST_TIMINGS,
    LocalRegion,
    all_running,
    sleeper_job,
    submit,
    wait_for,
)
from tether.region.supervisor import process_alive
from tether.store import keys
from tether.store.etcd_server import EtcdCluster

pytestmark = pytest.mark.timeout(240)

OUTAGE_S = 20.0
FAST_503_S = 5.0
"""How long an API request may take to answer 503 while the store is gone (the SDK and the
CLI give up after 10 s)."""
HEALTH_GRACE_S = 10
"""How long a machine's heartbeat may be missing before it is marked down. Longer than the
fast 2 s: the leader the first test kills may cost the agents their 2 s leases (an election
takes 1 to 2 s), and after the outage every service reconnects at once; an agent that
registers again a few seconds late on a loaded machine must not have its tasks moved."""
QUIET_S = 7.0
"""How long a job's pids must stay the same before the outage test takes them. The first
test's election may cost the agents their 2 s leases; they register again within the grace,
but a machine marked down after all would have its tasks moved and their old processes stopped
a moment later (docs/faults.md, *A soak under faults*): the outage test must not count those."""


def settled_pids(client: httpx.Client, handle: str, count: int) -> dict[int, int]:
    """The job's pids by index once all `count` tasks have run with them for QUIET_S."""
    since, last = time.monotonic(), None
    deadline = since + 60
    while True:
        tasks = all_running(client, handle, count)
        now = {int(t["index"]): int(t["pid"]) for t in tasks} if tasks else None
        if now is None or now != last:
            since, last = time.monotonic(), now
        elif time.monotonic() - since >= QUIET_S:
            return now
        assert time.monotonic() < deadline, f"{handle} did not settle within 60 s: {now}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster() -> Iterator[EtcdCluster]:
    with EtcdCluster(3, on_tmpfs=True) as started:
        yield started


@pytest.fixture(scope="module")
def region(cluster: EtcdCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    running = LocalRegion(
        tmp_path_factory.mktemp("store-faults") / "tether",
        store_args=["--store", cluster.url],
        agents=3,
        timings=FAST_TIMINGS | {"TETHER_HEALTH_GRACE_S": str(HEALTH_GRACE_S)},
    )
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


@pytest.fixture(scope="module")
def client(region: LocalRegion) -> Iterator[httpx.Client]:
    with region.client() as opened:
        yield opened


def test_region_keeps_scheduling_without_one_member_which_then_catches_up(
    cluster: EtcdCluster, region: LocalRegion, client: httpx.Client
) -> None:
    steady = submit(client, sleeper_job("steady", 3))
    wait_for(lambda: all_running(client, steady, 3), timeout_s=60, what="3 running")
    pids = pids_by_index(client, steady)
    services = region.service_pids()

    # The member that dies is the one every service talks to (gRPC's pick_first takes the URL's
    # first endpoint) and the leader: the region must find another member and wait out an
    # election.
    down = cluster.members[0]
    cluster.move_leader(down)
    down.kill()
    written = submit(client, sleeper_job("while-member-down", 2))
    assert client.post(f"/v1/jobs/{steady}/scale", json={"count": 4}).status_code == 200
    wait_for(lambda: all_running(client, written, 2), timeout_s=30, what="the new job to run")
    wait_for(lambda: all_running(client, steady, 4), timeout_s=30, what="the scaled job to run")
    assert {i: p for i, p in pids_by_index(client, steady).items() if i < 3} == pids

    down.start()
    # Alone: the key written while it was dead is there once it has caught up.
    kv = read_key(down.url, keys.job("default", "while-member-down"))
    assert kv is not None
    assert b"while-member-down" in kv.value
    assert dead_services(region, services) == []


def test_whole_store_outage_keeps_tasks_and_services_and_answers_503(
    cluster: EtcdCluster, region: LocalRegion, client: httpx.Client
) -> None:
    steady = "default/steady"
    pids = settled_pids(client, steady, 4)
    once = submit(client, sleeper_job("once", 2) | {"at_most_once": True})
    once_tasks = wait_for(lambda: all_running(client, once, 2), timeout_s=30, what="2 running")
    once_pids = {t["index"]: t["pid"] for t in once_tasks}
    services = region.service_pids()

    cluster.kill()
    killed_at = time.monotonic()
    try:
        for method, path, body in (
            ("GET", "/v1/jobs", None),
            ("POST", "/v1/jobs", sleeper_job("during-outage", 1)),
        ):
            asked_at = time.monotonic()
            response = client.request(method, path, json=body, timeout=30)
            took = time.monotonic() - asked_at
            assert response.status_code == 503, response.text
            assert response.headers["content-type"] == "application/problem+json"
            assert "store cannot be reached" in response.json()["detail"]
            assert took <= FAST_503_S, f"{method} {path} took {took:.1f} s to answer 503"

        # The price of at-most-once: its tasks stop once their agents' leases have gone
        # unrenewed for the fencing period, since the agents cannot tell an outage from their
        # own isolation.
        wait_for(
            lambda: not any(process_alive(pid) for pid in once_pids.values()),
            timeout_s=FAST_FENCING_S + 10,
            what="the at-most-once tasks to stop",
        )
        assert time.monotonic() - killed_at >= FAST_FENCING_S - 1
        while time.monotonic() - killed_at < OUTAGE_S:
            assert [i for i, pid in pids.items() if not process_alive(pid)] == []
            assert dead_services(region, services) == []
            time.sleep(1)
    finally:
        cluster.start()

    def answering() -> list[dict[str, Any]] | None:
        if client.get("/v1/jobs").status_code != 200:
            return None
        return all_running(client, steady, 4)

    after = wait_for(answering, timeout_s=30, what="the API to answer, and 4 tasks to run")
    assert {t["index"]: t["pid"] for t in after} == pids
    assert client.get("/v1/jobs/default/during-outage").status_code == 404
    handle = submit(client, sleeper_job("after-outage", 2))
    wait_for(lambda: all_running(client, handle, 2), timeout_s=30, what="a new job to run")
    assert dead_services(region, services) == []
    assert {t["index"]: t["pid"] for t in all_running(client, steady, 4) or []} == pids
    # The at-most-once tasks run again, as new attempts.

    def restarted() -> list[dict[str, Any]] | None:
        tasks = all_running(client, once, 2)
        fresh = tasks and not {t["pid"] for t in tasks} & set(once_pids.values())
        return tasks if fresh else None

    again = wait_for(restarted, timeout_s=30, what="the at-most-once tasks to run again")
    assert all(t["attempt"] > o["attempt"] for t, o in zip(again, once_tasks, strict=True))
