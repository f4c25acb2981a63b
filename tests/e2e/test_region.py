"""A whole region as real processes (`tether up` on SQLite): jobs run, fail, restart and move.

The tests share one region and run in file order; the last one kills an agent for good.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from tests.support.harness import (
    LocalRegion,
    all_running,
    get_json,
    machines_by_id,
    sleeper_job,
    submit,
    tasks_of,
    wait_for,
)
from tests.support.metrics import Scrape
from tests.support.readme import run_shell, tour_blocks
from tether.model import ShardLeader, shard_for
from tether.proto.taskcontrol.v1 import taskcontrol_pb2, taskcontrol_pb2_grpc
from tether.region.plan import SHARDS
from tether.region.supervisor import process_alive
from tether.taskcontrol.sdk import Controller

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def client(region: LocalRegion) -> Iterator[httpx.Client]:
    with region.client() as opened:
        yield opened


def test_three_task_job_runs_as_real_processes_on_three_msbs(client: httpx.Client) -> None:
    handle = submit(client, sleeper_job("spread", 3))
    tasks = wait_for(lambda: all_running(client, handle, 3), timeout_s=60, what="3 running tasks")
    machines = machines_by_id(client)
    msbs = {
        (machines[t["machine"]]["topology"]["dc"], machines[t["machine"]]["topology"]["msb"])
        for t in tasks
    }
    assert len(msbs) == 3
    for task in tasks:
        environ = Path(f"/proc/{task['pid']}/environ").read_bytes().split(b"\0")
        assert f"TETHER_TASK_ID={task['task_id']}".encode() in environ


def test_killed_task_process_is_restarted_once(client: httpx.Client) -> None:
    handle = "default/spread"
    before = {t["index"]: t for t in tasks_of(client, handle)}
    victim = before[1]
    os.kill(victim["pid"], signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        task = {t["index"]: t for t in tasks_of(client, handle)}[1]
        fresh = task["state"] == "running" and task["pid"] not in (None, victim["pid"])
        return task if fresh else None

    task = wait_for(restarted, timeout_s=30, what="task 1 to run again")
    assert task["restarts"] == 1
    assert task["attempt"] == victim["attempt"] + 1
    after = {t["index"]: t for t in tasks_of(client, handle)}
    assert after[0]["pid"] == before[0]["pid"]
    assert after[2]["pid"] == before[2]["pid"]


def test_bad_input_gets_a_clear_4xx_and_changes_nothing(
    region: LocalRegion, client: httpx.Client
) -> None:
    jobs_before = get_json(client, "/v1/jobs")["jobs"]

    malformed = client.post(
        "/v1/jobs", content=b"name: [unclosed", headers={"Content-Type": "application/yaml"}
    )
    assert malformed.status_code == 400
    assert malformed.headers["content-type"].startswith("application/problem+json")

    invalid = client.post("/v1/jobs", json={**sleeper_job("bad", 1), "count": 0})
    assert invalid.status_code == 422
    assert any("count" in str(error["loc"]) for error in invalid.json()["errors"])

    unknown = client.post("/v1/jobs", json=sleeper_job("lost", 1, entitlement="nobody"))
    assert unknown.status_code == 404
    assert "nobody" in unknown.json()["detail"]

    created = client.post(
        "/v1/entitlements",
        json={"name": "tiny", "quota": {"resources": {"cpu": 150, "memory_mib": 1024}}},
    )
    assert created.status_code == 201, created.text
    over = client.post("/v1/jobs", json=sleeper_job("big", 2, entitlement="tiny"))
    assert over.status_code == 409
    assert "cpu" in over.json()["detail"]

    anonymous = httpx.post(f"{region.url}/v1/jobs", json=sleeper_job("anon", 1))
    assert anonymous.status_code == 401
    wrong = httpx.get(f"{region.url}/v1/jobs", headers={"Authorization": "Bearer not-a-token"})
    assert wrong.status_code == 401

    bob = client.post("/admin/principals", json={"name": "bob", "roles": []})
    assert bob.status_code == 201
    bob_headers = {"Authorization": f"Bearer {bob.json()['token']}"}
    forbidden = httpx.post(
        f"{region.url}/v1/jobs", json=sleeper_job("bobs", 1), headers=bob_headers
    )
    assert forbidden.status_code == 403
    assert httpx.get(f"{region.url}/v1/jobs", headers=bob_headers).json()["jobs"] == []

    jobs_after = get_json(client, "/v1/jobs")["jobs"]
    assert [j["handle"] for j in jobs_after] == [j["handle"] for j in jobs_before]
    assert [j["generation"] for j in jobs_after] == [j["generation"] for j in jobs_before]


def test_killed_scheduler_leader_hands_over_and_tasks_keep_running(
    region: LocalRegion, client: httpx.Client
) -> None:
    shard = shard_for("default", list(SHARDS))
    leader = region.shard_leader(shard)
    assert leader is not None
    pids_before = {t["index"]: t["pid"] for t in tasks_of(client, "default/spread")}

    os.kill(leader.pid, signal.SIGKILL)
    killed_at = datetime.now(UTC)

    def new_leader() -> ShardLeader | None:
        current = region.shard_leader(shard)
        return current if current is not None and current.pid != leader.pid else None

    successor = wait_for(new_leader, timeout_s=20, what="the standby to lead", interval_s=0.1)
    # Measured by the successor's own stamp of its win, not by this test's polling, which
    # opens a store connection per look and is slow on a loaded machine.
    took = (successor.since - killed_at).total_seconds()
    assert took <= 3 + 2, f"the standby took {took:.1f} s to lead"
    assert successor.pid in region.service_pids().values()

    # The new leader acts: a job submitted now runs.
    handle = submit(client, sleeper_job("after-failover", 1))
    wait_for(lambda: all_running(client, handle, 1), timeout_s=30, what="the new job to run")
    assert {t["index"]: t["pid"] for t in tasks_of(client, "default/spread")} == pids_before
    assert client.delete(f"/v1/jobs/{handle}").status_code == 202


def test_deleting_a_job_stops_its_processes_and_frees_its_machines(
    client: httpx.Client,
) -> None:
    wait_for(
        lambda: client.get("/v1/jobs/default/after-failover").status_code == 404,
        timeout_s=30,
        what="the previous job to be gone",
    )
    allocated_before = {m: v["allocated"] for m, v in machines_by_id(client).items()}
    handle = submit(client, sleeper_job("doomed", 2))
    tasks = wait_for(lambda: all_running(client, handle, 2), timeout_s=60, what="2 running")
    assert {m: v["allocated"] for m, v in machines_by_id(client).items()} != allocated_before

    assert client.delete(f"/v1/jobs/{handle}").status_code == 202
    wait_for(
        lambda: client.get(f"/v1/jobs/{handle}").status_code == 404,
        timeout_s=30,
        what="the job to be deleted",
    )
    pids = [task["pid"] for task in tasks]
    wait_for(
        lambda: not any(process_alive(pid) for pid in pids),
        timeout_s=10,
        what=f"processes {pids} to end",
    )
    assert {m: v["allocated"] for m, v in machines_by_id(client).items()} == allocated_before

    # The same job again: its tasks run again, although their machines ran the old ones.
    again = submit(client, sleeper_job("doomed", 2))
    rerun = wait_for(lambda: all_running(client, again, 2), timeout_s=60, what="2 running again")
    assert min(t["attempt"] for t in rerun) > max(t["attempt"] for t in tasks)
    assert client.delete(f"/v1/jobs/{again}").status_code == 202
    wait_for(
        lambda: client.get(f"/v1/jobs/{again}").status_code == 404,
        timeout_s=30,
        what="the job to be deleted again",
    )


def tether(region: LocalRegion, *args: str, timeout_s: float = 90) -> str:
    """Runs the real `tether` CLI against the region; returns stdout, fails on a non-zero exit."""
    done = region.cli(*args, timeout_s=timeout_s)
    assert done.returncode == 0, f"tether {' '.join(args)}: {done.stderr}"
    return done.stdout


def test_the_readme_tour_runs_as_written(region: LocalRegion, client: httpx.Client) -> None:
    # Every command of the tour, as a user types them in the directory that holds `.tether`.
    home = region.state_dir.parent
    cli, curl, _over_tls = tour_blocks()
    said = run_shell(cli.commands(), home, region.url)
    assert "hello from task default/hello/0" in said
    assert "all 5 tasks run version 2" in said
    assert client.get("/v1/jobs/default/hello").status_code == 404
    said = run_shell(curl.commands(), home, region.url)
    assert '"handle":"default/hello"' in said.replace(" ", "")
    wait_for(
        lambda: client.get("/v1/jobs/default/hello").status_code == 404,
        timeout_s=60,
        what="the job curl deleted to be gone",
    )

    # Found by its directory alone, as `tether up --dir` left it; its records as JSON.
    assert submit(client, sleeper_job("listed", 1)) == "default/listed"
    by_dir = {**os.environ, "TETHER_REGION_DIR": str(region.state_dir)}
    for name in ("TETHER_URL", "TETHER_TOKEN"):
        by_dir.pop(name, None)
    listed = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "job", "ls", "-o", "json"],
        env=by_dir,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert "default/listed" in [job["handle"] for job in json.loads(listed.stdout)]
    tether(region, "job", "rm", "default/listed", "--wait")

    failed = region.cli("job", "show", "default/nope", timeout_s=60)
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr
    assert "nope" in failed.stderr


def test_tether_events_follows_a_job_from_submission_to_running_and_deletion(
    region: LocalRegion, client: httpx.Client
) -> None:
    handle = "default/followed"
    # From the revision now: what follows is told however soon the stream opens.
    since = client.get("/v1/jobs").headers["X-Tether-Revision"]
    command = ["events", "-f", "--job", handle, "--since", since, "-o", "json"]
    follower = subprocess.Popen(
        [sys.executable, "-m", "tether.cli.main", *command],
        env={**os.environ, "TETHER_URL": region.url, "TETHER_TOKEN": region.token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[dict[str, Any]] = []
    reading = threading.Thread(
        target=lambda: lines.extend(json.loads(line) for line in follower.stdout or ()),
        daemon=True,
    )
    reading.start()
    try:
        assert submit(client, sleeper_job("followed", 2)) == handle
        wait_for(lambda: all_running(client, handle, 2), timeout_s=60, what="2 running tasks")
        wait_for(
            lambda: sum(line["kind"] == "task.started" for line in lines) == 2 or None,
            timeout_s=15,
            what="both starts told",
        )
        assert client.delete(f"/v1/jobs/{handle}").status_code == 202
        wait_for(
            lambda: any(line["kind"] == "job.deleted" for line in lines) or None,
            timeout_s=60,
            what="the deletion told",
        )
    finally:
        follower.terminate()
        follower.wait(timeout=10)
    kinds = [line["kind"] for line in lines]
    assert kinds[:2] == ["job.submitted", "job.queued"], kinds
    for earlier, later in (
        ("job.admitted", "task.placed"),
        ("task.placed", "task.started"),
        ("task.started", "job.deleting"),
        ("job.deleting", "task.exited"),
        ("task.exited", "job.deleted"),
    ):
        assert kinds.index(earlier) < kinds.index(later), kinds
    assert {line["job"] for line in lines} == {handle}
    revisions = [line["revision"] for line in lines]
    assert revisions == sorted(revisions)


def test_killed_agent_machine_goes_down_and_its_tasks_run_elsewhere(
    region: LocalRegion, client: httpx.Client
) -> None:
    handle = "default/spread"
    before = wait_for(lambda: all_running(client, handle, 3), timeout_s=30, what="3 running")
    victim = before[0]["machine"]
    os.kill(region.service_pids()[f"agent-{victim}"], signal.SIGKILL)

    wait_for(
        lambda: machines_by_id(client)[victim]["state"] == "down",
        timeout_s=20,
        what=f"machine {victim} to be down",
    )

    def moved() -> list[dict[str, Any]] | None:
        tasks = all_running(client, handle, 3)
        return tasks if tasks and all(t["machine"] != victim for t in tasks) else None

    after = wait_for(moved, timeout_s=30, what="every task to run off the dead machine")
    moved_task = next(t for t in after if t["index"] == before[0]["index"])
    assert moved_task["attempt"] > before[0]["attempt"]
    assert moved_task["restarts"] == before[0]["restarts"]


class ApproveNothing(Controller):
    def decide(self, request: taskcontrol_pb2.TaskControlRequest) -> list[str]:
        return []


def test_a_controller_registers_with_the_regions_registry(region: LocalRegion) -> None:
    async def scenario() -> list[str]:
        controller = ApproveNothing()
        await controller.start(
            "127.0.0.1:0", region.registry_address, region.token, job_handle="default/hello"
        )
        try:
            async with grpc.aio.insecure_channel(region.registry_address) as channel:
                registry = taskcontrol_pb2_grpc.TaskControllerRegistryStub(channel)
                listed = await registry.List(
                    taskcontrol_pb2.ListRequest(entitlement="default"),
                    metadata=(("authorization", f"Bearer {region.token}"),),
                )
            assert [r.endpoint for r in listed.registrations] == [controller.address]
            return [r.job_handle for r in listed.registrations]
        finally:
            await controller.stop()

    assert asyncio.run(scenario()) == ["default/hello"]


def test_the_cli_lists_every_shard_with_its_leader(region: LocalRegion) -> None:
    def leaders() -> dict[str, ShardLeader | None]:
        return {shard: region.shard_leader(shard) for shard in SHARDS}

    def listed_under_the_same_leaders() -> tuple[str, dict[str, ShardLeader]] | None:
        """`shard ls` between two reads of the leaders that agree: the leaders it must show.
        (A leader's lease is short: a stall may hand a shard to its standby meanwhile.)"""
        before = leaders()
        listed = region.cli("shard", "ls")
        assert listed.returncode == 0, listed.stderr
        after = leaders()
        if before != after:
            return None
        held = {shard: leader for shard, leader in after.items() if leader is not None}
        return (listed.stdout, held) if len(held) == len(SHARDS) else None

    stdout, held = wait_for(
        listed_under_the_same_leaders,
        timeout_s=60,
        what="`shard ls` while every shard keeps one leader",
    )
    home = shard_for("default", list(SHARDS))
    for shard, leader in held.items():
        row = next(line for line in stdout.splitlines() if f" {shard} " in line)
        assert str(leader.pid) in row
        assert ("default" in row) is (shard == home)


def test_every_service_serves_its_metrics_where_region_json_says(
    region: LocalRegion, client: httpx.Client
) -> None:
    state = region.state()
    # Frontends serve theirs at GET /metrics, on the REST port.
    assert set(state.metrics) == {name for name in state.processes if "frontend" not in name}
    # Earlier tests of the module killed a scheduler leader and an agent for good.
    endpoints: dict[str, str] = {
        name: url for name, url in state.metrics.items() if process_alive(state.processes[name])
    }
    assert len(endpoints) >= len(state.metrics) - 2

    def scrape(url: str) -> Scrape:
        response = httpx.get(url, timeout=10)
        assert response.status_code == 200, f"{url}: {response.status_code}"
        return Scrape.parse(response.text)

    def total(role: str, name: str, **labels: str) -> float:
        return sum(
            scrape(url).value(name, **labels)
            for service, url in endpoints.items()
            if service.startswith(role)
        )

    def moving() -> dict[str, float]:
        return {
            "placed": total("allocator", "tether_allocator_placements_total", outcome="placed"),
            "started": total("agent", "tether_agent_tasks_started_total"),
            "reconciles": total("scheduler", "tether_scheduler_reconcile_duration_seconds_count"),
        }

    before = moving()
    handle = submit(client, sleeper_job("metered", 2))
    wait_for(lambda: all_running(client, handle, 2), timeout_s=60, what="2 running tasks")
    after = moving()
    assert all(after[name] - before[name] >= 2 for name in after), (before, after)

    # Every service talks to the store (the registry only when asked); the leaders' terms
    # began with the region.
    for service, url in endpoints.items():
        requests = scrape(url).value("tether_store_request_duration_seconds_count")
        assert requests > 0 or service == "registry", service
    started = total("scheduler", "tether_scheduler_leader_terms_total", event="started")
    assert started >= len(SHARDS)
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    submitted = Scrape.parse(response.text).value(
        "tether_frontend_requests_total", method="POST", route="/v1/jobs", status="201"
    )
    assert submitted >= 1
    assert client.delete(f"/v1/jobs/{handle}").status_code == 202
