"""Every service refuses to start on a store that holds no region, naming the setting to fix,
instead of serving an empty store (as one started by hand without TETHER_STORE would)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether.store import open_store

COMMANDS = {
    "frontend": ["frontend", "--port", "0"],
    "scheduler": ["scheduler", "--shard", "shard-0"],
    "allocator": ["allocator", "--port", "0"],
    "broker": ["broker", "--dc", "dc1"],
    "health": ["health"],
    "registry": ["registry", "--port", "0"],
    "agent": ["agent", "--machine-id", "m1", "--dc", "dc1", "--msb", "msb1", "--rack", "r1"],
}


def refused(argv: list[str], cwd: Path) -> str:
    """Runs `tether <argv>` without any TETHER_ setting; returns its stderr once it has
    refused to start."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_AGENT_WORK_DIR"] = str(cwd / "agent")
    ran = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1, ran.stderr
    assert "holds no region" in ran.stderr
    assert "TETHER_STORE" in ran.stderr
    assert "Traceback" not in ran.stderr
    return ran.stderr


@pytest.mark.parametrize("service", sorted(COMMANDS))
def test_a_service_refuses_a_store_without_a_region(service: str, tmp_path: Path) -> None:
    store = tmp_path / "stores" / "region.db"
    url = f"sqlite:///{store}"
    assert url in refused([*COMMANDS[service], "--store", url], tmp_path)
    # Refused, and left as it was: no empty store (nor its directory) to be mistaken later
    # for the region's.
    assert not store.parent.exists()


async def test_a_store_that_exists_but_holds_no_region_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    async with open_store(url):
        pass
    assert "region/config is missing" in refused([*COMMANDS["health"], "--store", url], tmp_path)


def test_without_a_store_setting_the_default_store_is_refused_too(tmp_path: Path) -> None:
    # The default is a SQLite file under ./.tether, on a host without a region: not there.
    assert ".tether/store.db" in refused(COMMANDS["health"], tmp_path)
    assert not (tmp_path / ".tether").exists()
