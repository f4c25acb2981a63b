"""A harvest machine end to end, with `tether up`, a real harvest agent replaying a capacity
trace and real task processes: its shrink moves the lowest-priority tasks off it with notice and
leaves the others running; its eviction notice drains it before the deadline."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.harness import LocalRegion, get_json, sleeper_job, submit, tasks_of, wait_for

NOTICE_S = 3
SHRINK_AT_S, EVICT_AT_S, EVICT_IN_S = 20, 35, 6
"""The trace: whole for 20 s (the jobs are placed meanwhile), then a share too small for all
three tasks, then an eviction notice 6 s ahead."""
SLACK = timedelta(seconds=3)
"""A move due at a deadline shows in the API after the reconcile that executes it and the
agent's report."""


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    running = LocalRegion(
        tmp_path_factory.mktemp("region") / "tether",
        agents=2,
        extra_env={"TETHER_BROKER_HARVEST_NOTICE_S": str(NOTICE_S)},
    )
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


def pinned_job(name: str, count: int, priority: int) -> dict[str, Any]:
    """Sleepers of 300 millicores that run only on harvest machines of the pool "harvest"."""
    spec = sleeper_job(name, count)
    spec["priority"] = priority
    spec["task"]["resources"]["cpu"] = 300
    spec["placement"] = {
        "harvest": True,
        "constraints": [{"attribute": "pool", "op": "==", "value": "harvest"}],
        "spread": {"level": "msb", "max_skew": 10},
    }
    return spec


def start_harvest_agent(
    region: LocalRegion, trace: Path, work_dir: Path
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tether.cli.main", "agent", "--machine-id", "h1"]
    command += ["--msb", "msb-h", "--attribute", "pool=harvest", "--cpu", "1000"]
    command += ["--memory-mib", "2048", "--work-dir", str(work_dir), "--harvest-trace", str(trace)]
    env = {**region.env(), "TETHER_STORE": region.store_url()}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def on_machine(client: httpx.Client, handle: str, machine: str) -> dict[int, dict[str, Any]]:
    return {t["index"]: t for t in tasks_of(client, handle) if t["machine"] == machine}


def notice(client: httpx.Client, kind: str) -> dict[str, Any] | None:
    notices = get_json(client, "/v1/maintenance")["maintenance"]
    return next((n for n in notices if n["kind"] == kind), None)


def test_a_harvest_machine_shrinks_then_is_evicted(region: LocalRegion, tmp_path: Path) -> None:
    trace = tmp_path / "h1.jsonl"
    steps = [
        {"at_s": SHRINK_AT_S, "usable": {"cpu": 500, "memory_mib": 2048}},
        {"at_s": EVICT_AT_S, "evict_in_s": EVICT_IN_S},
    ]
    trace.write_text("".join(json.dumps(step) + "\n" for step in steps))
    with region.client() as client:
        low, high = (
            submit(client, pinned_job("low", 2, 50)),
            submit(client, pinned_job("high", 1, 200)),
        )
        agent = start_harvest_agent(region, trace, tmp_path / "h1")
        try:
            # The three tasks fit the whole machine (900 of 1000 millicores) and run there.
            wait_for(
                lambda: len(on_machine(client, low, "h1")) == 2 and on_machine(client, high, "h1"),
                timeout_s=SHRINK_AT_S,
                what="every task placed on h1 before its share shrinks",
            )
            # 500 millicores hold the high task, not the low ones: they move, with notice.
            shrink = wait_for(
                lambda: notice(client, "harvest-shrink"),
                timeout_s=SHRINK_AT_S + 15,
                what="the shrink's notice",
            )
            assert shrink["machines"] == ["h1"]
            assert sorted(shrink["tasks"]) == [f"{low}/0", f"{low}/1"]
            # Moved within the notice: at once as the job's budget of tasks down allows (no
            # controller), the rest at its end.
            wait_for(
                lambda: not on_machine(client, low, "h1"),
                timeout_s=NOTICE_S + 20,
                what="the low tasks moved off h1",
            )
            assert datetime.now(UTC) <= datetime.fromisoformat(shrink["start"]) + SLACK
            [kept] = on_machine(client, high, "h1").values()
            assert kept["state"] == "running"

            # The eviction notice: h1 drains and the high task leaves before the deadline.
            eviction = wait_for(
                lambda: notice(client, "eviction"),
                timeout_s=EVICT_AT_S + 15,
                what="the eviction notice",
            )
            deadline = datetime.fromisoformat(eviction["start"])
            wait_for(
                lambda: not on_machine(client, high, "h1"),
                timeout_s=EVICT_IN_S + 20,
                what="the high task moved off h1",
            )
            assert datetime.now(UTC) <= deadline + SLACK
            machines = {m["id"]: m for m in get_json(client, "/v1/machines")["machines"]}
            assert machines["h1"]["state"] == "draining"
        finally:
            agent.kill()
            agent.wait()
