"""`tether up` restarts services that die, with backoff, and gives up on one that keeps failing.

One region (three agents, SQLite) whose services `tether up` supervises, unlike the fault
tests' regions, which restart services by hand.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.faults import TwiceSampler, task_processes
from tests.support.harness import (
    LocalRegion,
    all_running,
    running_for,
    sleeper_job,
    submit,
    wait_for,
)
from tether.region.restarts import RestartPolicy
from tether.region.supervisor import process_alive

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    started = LocalRegion(
        tmp_path_factory.mktemp("supervision") / "tether", agents=3, supervised=True
    )
    try:
        started.start()
        yield started
    finally:
        started.cleanup()


def restarted(region: LocalRegion, name: str, old_pid: int) -> int | None:
    """The service's new pid once `tether up` has started it again and it runs."""
    pid = region.state().processes[name]
    return pid if pid != old_pid and process_alive(pid) else None


def kill(region: LocalRegion, name: str) -> int:
    pid = region.state().processes[name]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not process_alive(pid), timeout_s=10, what=f"{name} to die")
    return int(pid)


def kill_and_await_restart(region: LocalRegion, name: str) -> int:
    """Kills the service and returns its new pid once `tether up` has started it again."""
    old = kill(region, name)
    return wait_for(lambda: restarted(region, name, old), timeout_s=30, what=f"{name} again")


def test_dead_services_are_restarted_and_nothing_runs_twice_for_long(region: LocalRegion) -> None:
    client = region.client()
    handle = submit(client, sleeper_job("steady", 3))
    tasks = wait_for(lambda: all_running(client, handle, 3), timeout_s=60, what="3 running")
    agent = f"agent-{tasks[0]['machine']}"
    leader = next(s for s in client.get("/v1/region").json()["shards"] if s["leader"])
    scheduler = next(
        name
        for name, pid in region.state().processes.items()
        if name.startswith("scheduler-") and f":{pid}:" in leader["leader"]
    )
    sampler = TwiceSampler(region.state_dir)
    sampler.start()
    try:
        for name in (agent, scheduler):
            kill_and_await_restart(region, name)
            assert region.state().restarts[name] == 1
            # 0.5 s, or 1 s when it had run less than 10 s (a fast failure).
            assert f"{name} exited with code -9: restarting it in " in region.output()
            assert f"{name} restarted (pid" in region.output()

        # The restarted agent takes its machine's tasks up again (or, had they been replaced
        # meanwhile, kills the old processes): each task ends up running once.
        def settled() -> list[dict[str, Any]] | None:
            now = all_running(client, handle, 3)
            ids = [p.task_id for p in task_processes(region.state_dir)]
            return now if now and sorted(ids) == [f"{handle}/{i}" for i in range(3)] else None

        wait_for(settled, timeout_s=60, what="each task to run once")
        # A job submitted now is scheduled and placed by the restarted services.
        again = submit(client, sleeper_job("after", 2))
        wait_for(lambda: all_running(client, again, 2), timeout_s=60, what="a new job to run")
    finally:
        sampler.stop()
    assert sampler.samples > 10
    assert region.state().dead == []


def test_status_shows_the_restarts(region: LocalRegion) -> None:
    shown = region.cli("status", "--dir", str(region.state_dir))
    assert shown.returncode == 0, shown.stderr
    assert "2 restarted" in shown.stdout
    rows = [line.replace("│", " ").split() for line in shown.stdout.splitlines()]
    restarted_rows = [row for row in rows if row and row[-1] == "running"]
    assert {row[0].split("-")[0] for row in restarted_rows} == {"agent", "scheduler"}


def test_a_service_that_keeps_failing_is_given_up(region: LocalRegion) -> None:
    fast_s = RestartPolicy().fast_s
    # The first death must not count as a fast failure, however quickly the region came up and
    # the tests before this one ran: `tether up` counts only deaths within `fast_s` of a start.
    first = region.state().processes["frontend"]
    wait_for(
        lambda: running_for(first) > fast_s,
        timeout_s=fast_s + 30,
        what=f"the frontend to have run {fast_s:g}s",
    )
    # Then killed as soon as it is back, five times: each death within `fast_s` of its start.
    for _ in range(5):
        kill_and_await_restart(region, "frontend")
    kill(region, "frontend")
    wait_for(
        lambda: "frontend" in region.state().dead,
        timeout_s=30,
        what="tether up to give up on the frontend",
    )
    assert (
        f"frontend exited with code -9: it failed 5 times in a row within {fast_s:g}s of starting"
        in region.output()
    )
    assert region.state().restarts["frontend"] == 5


def descendants_of(pid: int) -> set[int]:
    """The processes `pid` started, and theirs (the services are the fork server's children)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_while_the_services_start_stops_the_region(
    tmp_path: Path, signum: signal.Signals
) -> None:
    # A signal that lands while `tether up` forks a service used to be lost, and the region
    # ran on; it is now recorded and acted on once the service has started.
    region = LocalRegion(tmp_path / "tether", agents=4)
    try:
        region.launch()
        assert region.process is not None
        up = region.process.pid
        started = wait_for(
            # The fork server and the first services it forked.
            lambda: pids if len(pids := descendants_of(up)) >= 4 else None,
            timeout_s=60,
            what="tether up to start its first services",
        )
        region.process.send_signal(signum)
        assert region.process.wait(timeout=60) == 0, region.output()
        services = started | descendants_of(up)
        wait_for(
            lambda: not any(process_alive(pid) for pid in services),
            timeout_s=30,
            what="every service to stop",
        )
        assert "Stopped every service" in region.output()
    finally:
        region.cleanup()
