"""Two frontends serve one region: they are stateless, so either sees what the other wrote."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import LocalRegion, all_running, get_json, sleeper_job, wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    running = LocalRegion(tmp_path_factory.mktemp("frontends") / "tether", agents=2, frontends=2)
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


def test_every_frontend_is_recorded_and_ready(region: LocalRegion) -> None:
    state = region.state()
    assert state.urls == [region.url, f"http://127.0.0.1:{region.port + 2}"]
    assert state.url == region.url
    assert {"frontend", "frontend-1"} <= set(state.processes)
    for number in range(2):
        with region.client(number) as client:
            assert client.get("/readyz").status_code == 200


def test_a_job_submitted_through_one_frontend_is_managed_through_the_other(
    region: LocalRegion,
) -> None:
    with region.client(0) as first, region.client(1) as second:
        created = first.post("/v1/jobs", json=sleeper_job("across", 1))
        assert created.status_code == 201, created.text
        handle = created.json()["handle"]

        # Another frontend's cache hears of a write a moment later: a client reads its write
        # there by sending back the revision the write answered with (read-your-writes).
        written = created.headers["x-tether-revision"]
        assert get_json(second, f"/v1/jobs/{handle}?min_revision={written}")["count"] == 1
        scaled = second.post(f"/v1/jobs/{handle}/scale", json={"count": 2})
        assert scaled.status_code == 200, scaled.text
        written = scaled.headers["x-tether-revision"]
        assert get_json(first, f"/v1/jobs/{handle}?min_revision={written}")["generation"] == 2
        tasks = wait_for(lambda: all_running(first, handle, 2), timeout_s=60, what="2 running")
        assert {task["index"] for task in tasks} == {0, 1}

        assert second.delete(f"/v1/jobs/{handle}").status_code == 202
        wait_for(
            lambda: first.get(f"/v1/jobs/{handle}").status_code == 404,
            timeout_s=60,
            what="the job to be gone, as seen through the first frontend",
        )


def test_up_refuses_a_frontend_port_in_use(region: LocalRegion, tmp_path: Path) -> None:
    # Frontend 1 of this region would need the running region's first port.
    base = region.port - 2
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tether.cli.main", "up", "--dir", str(tmp_path / "other")),
            *("--port", str(base), "--frontends", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "(for a frontend) is not free" in done.stderr
    assert not (tmp_path / "other" / "region.json").exists()
