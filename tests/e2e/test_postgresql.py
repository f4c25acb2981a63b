"""A whole region on the SQL store on a real PostgreSQL server: `tether up --store postgresql://`
runs a job's tasks as real processes, restarts one that is killed, and deletes the job."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.harness import (
    LocalRegion,
    all_running,
    sleeper_job,
    submit,
    tasks_of,
    wait_for,
)
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def region(postgres_server: PostgresServer, tmp_path: Path) -> Iterator[LocalRegion]:
    running = LocalRegion(tmp_path / "tether", store_args=["--store", postgres_server.database()])
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


def test_a_region_on_postgresql_runs_restarts_and_deletes_a_job(region: LocalRegion) -> None:
    assert region.store_url().startswith("postgresql://")
    with region.client() as client:
        handle = submit(client, sleeper_job("on-pg", 3))
        tasks = wait_for(lambda: all_running(client, handle, 3), timeout_s=60, what="3 tasks")
        victim = tasks[0]
        os.kill(victim["pid"], signal.SIGKILL)

        def restarted() -> bool:
            task = {t["index"]: t for t in tasks_of(client, handle)}[victim["index"]]
            return task["state"] == "running" and task["pid"] not in (None, victim["pid"])

        wait_for(lambda: restarted() or None, timeout_s=30, what="the killed task again")
        assert client.delete(f"/v1/jobs/{handle}").status_code == 202
        wait_for(
            lambda: client.get(f"/v1/jobs/{handle}").status_code == 404 or None,
            timeout_s=60,
            what="the job deleted",
        )
