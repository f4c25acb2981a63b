"""Stopping a whole region and starting it again loses nothing, on both store backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import (
    FAST_TIMINGS,
    LocalRegion,
    all_running,
    get_json,
    sleeper_job,
    wait_for,
)
from tether.region.supervisor import process_alive

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["sqlite", "etcd"])
def region(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalRegion]:
    store_args = ["--etcd"] if request.param == "etcd" else []
    # The agents get 10 s, not the tests' usual 2 s, to come back before their machines count
    # as down: the whole region starts at once, and on two busy cores an agent's start can
    # take longer than 2 s (the default grace is 5 s).
    timings = FAST_TIMINGS | {"TETHER_HEALTH_GRACE_S": "10"}
    running = LocalRegion(tmp_path / "tether", store_args=store_args, agents=3, timings=timings)
    try:
        yield running
    finally:
        running.cleanup()


def test_restarted_region_resumes_jobs_and_readopts_running_tasks(region: LocalRegion) -> None:
    region.start()
    with region.client() as client:
        response = client.post("/v1/jobs", json=sleeper_job("survivor", 3))
        assert response.status_code == 201, response.text
        before = wait_for(
            lambda: all_running(client, "default/survivor", 3), timeout_s=60, what="3 running"
        )

    region.stop()
    assert "Stopped every service" in region.output()
    for service_pid in region.service_pids_at_stop:
        assert not process_alive(service_pid), f"service process {service_pid} outlived the region"
    for task in before:
        assert process_alive(task["pid"]), "a task died with the control plane"

    region.start()
    with region.client() as client:
        assert [j["handle"] for j in get_json(client, "/v1/jobs")["jobs"]] == ["default/survivor"]
        after = wait_for(
            lambda: all_running(client, "default/survivor", 3), timeout_s=60, what="3 running"
        )
        by_index = {t["index"]: t for t in before}
        for task in after:
            old = by_index[task["index"]]
            assert (task["pid"], task["attempt"], task["restarts"]) == (
                old["pid"],
                old["attempt"],
                old["restarts"],
            )

    region.stop()
    down = region.cli("down", "--dir", str(region.state_dir), "--tasks", timeout_s=60)
    assert down.returncode == 0, down.stderr
    assert "Stopped 3 task processes" in down.stderr
    for task in after:
        assert not process_alive(task["pid"])
