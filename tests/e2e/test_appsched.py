"""`tether appsched gang` end to end: the real command against `tether up` restarts a training
job's tasks for an update all together."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.harness import LocalRegion, all_running, sleeper_job, wait_for
from tether.cli.common import TOKEN_HINT


def appsched(region: LocalRegion, *args: str) -> list[str]:
    """The real command, against the region's registry."""
    return [
        sys.executable,
        *("-m", "tether.cli.main", "appsched", *args),
        *("--registry", region.registry_address),
    ]


def with_token(token: str) -> dict[str, str]:
    return {**os.environ, "TETHER_TOKEN": token}


def test_gang_restarts_every_task_together(region: LocalRegion, tmp_path: Path) -> None:
    handle = "default/gang"
    log_path = tmp_path / "gang.log"
    with region.client() as client:
        response = client.post("/v1/jobs", json=sleeper_job("gang", 3))
        assert response.status_code == 201, response.text
        before = wait_for(lambda: all_running(client, handle, 3), timeout_s=60, what=handle)

        with log_path.open("wb") as log:
            controller = subprocess.Popen(
                appsched(region, "gang", "--job", handle, "--ttl", "30"),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
                env=with_token(region.token),
            )
        try:
            registered = wait_for(
                lambda: re.search(r"serving on (\S+), registration (\S+)", log_path.read_text()),
                timeout_s=20,
                what="the controller to register",
            )
            assert registered[2]
            patched = client.patch(f"/v1/jobs/{handle}", json={"version": "2"})
            assert patched.status_code == 200, patched.text

            def updated() -> list[dict[str, object]] | None:
                tasks = all_running(client, handle, 3)
                return tasks if tasks and all(t["version"] == "2" for t in tasks) else None

            after = wait_for(updated, timeout_s=40, what="every task on version 2")
        finally:
            controller.send_signal(signal.SIGTERM)
            try:
                stopped = controller.wait(15)
            except subprocess.TimeoutExpired:
                controller.kill()
                controller.wait()
                raise
    log_text = log_path.read_text()
    assert stopped == 0, log_text

    # One call approved all three; no call approved some of them.
    decisions = re.findall(rf"{handle}: acked (\d+) of (\d+) pending", log_text)
    assert ("3", "3") in decisions, log_text
    assert all(acked in ("0", "3") for acked, _ in decisions), log_text
    old = {t["index"]: t for t in before}
    for task in after:
        assert task["pid"] != old[task["index"]]["pid"]
        assert task["attempt"] == old[task["index"]]["attempt"] + 1


def test_a_bad_token_is_refused_in_one_line(region: LocalRegion, tmp_path: Path) -> None:
    refused = subprocess.run(
        appsched(region, "rolling", "--job", "default/gang"),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=with_token("not-a-token"),
        timeout=30,
        check=False,
    )
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        f"error: the TaskController registry at {region.registry_address} refused the "
        "registration: UNAUTHENTICATED: the bearer token is not known to this region",
        f"  hint: {TOKEN_HINT}",
    ]
