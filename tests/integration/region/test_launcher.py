"""The fork server `tether up` starts its services from: each service a process of its own,
named by its command line, appending to its log, its exit code reported as `subprocess` does,
and none outliving the fork server."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from tests.support.harness import wait_for
from tests.support.region import create_region
from tether.agent.procfs import start_ticks
from tether.region.launcher import Launcher
from tether.store import open_store

HEALTH_TITLE = "python -m tether.cli.services health --log-level INFO"


async def _new_region(url: str) -> None:
    async with open_store(url) as store:
        await create_region(store)


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode()


def _started(log: Path) -> bool:
    return log.exists() and "health: started" in log.read_text()


def test_services_are_forked_named_logged_and_reaped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    asyncio.run(_new_region(url))
    launcher = Launcher({**os.environ, "TETHER_STORE": url}, tmp_path / "forkserver.log", tmp_path)
    try:
        log = tmp_path / "health.log"
        health = launcher.spawn("health", ["health", "--log-level", "INFO"], HEALTH_TITLE, log, {})
        wait_for(lambda: _started(log), timeout_s=60, what="the health service to start")
        assert _cmdline(health.pid) == HEALTH_TITLE
        assert health.poll() is None

        refused = launcher.spawn("nope", ["nope"], "python -m tether.cli.services nope", log, {})
        assert refused.wait(timeout=60) == 2
        assert "usage: python -m tether.cli.services" in log.read_text()

        health.kill()
        assert health.wait(timeout=30) == -signal.SIGKILL
        again = launcher.spawn("health", ["health", "--log-level", "INFO"], HEALTH_TITLE, log, {})
        assert again.pid != health.pid
        wait_for(
            lambda: log.read_text().count("health: started") == 2,
            timeout_s=60,
            what="the health service to start again",
        )
    finally:
        launcher.stop(timeout_s=30)
    # The fork server ended, and the service it still ran with it (SIGTERM from the kernel).
    wait_for(
        lambda: start_ticks(again.pid) is None,
        timeout_s=30,
        what="the service to end with the fork server",
    )
    assert "health: stopping" in log.read_text().split("health: started")[-1]
