"""`tether region init` on an embedded SQLite store: the region's first records, once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.unit.cli.conftest import run
from tether.model import Entitlement, PrincipalRecord, RegionConfig, from_json, token_digest
from tether.store import keys, open_store


def read(url: str, key: str) -> bytes | None:
    async def get() -> bytes | None:
        async with open_store(url) as store:
            found = await store.get(key)
            return None if found is None else found.value

    return asyncio.run(get())


def test_init_creates_the_region_once_and_keeps_its_config(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    token_file = tmp_path / "secrets" / "admin.token"
    args = ("region", "init", "--store", url, "--admin-token-file", str(token_file))
    first = run(*args, "--name", "east", "--shards", "3")
    assert first.exit_code == 0, first.output
    assert "region east created" in first.stdout
    config = from_json(RegionConfig, read(url, keys.region_config()) or b"")
    assert (config.name, config.shards) == ("east", ["shard-0", "shard-1", "shard-2"])
    token = token_file.read_text().strip()
    assert token_file.stat().st_mode & 0o777 == 0o600
    admin = from_json(PrincipalRecord, read(url, keys.principal(token_digest(token))) or b"")
    assert admin.is_admin
    default = from_json(Entitlement, read(url, keys.entitlement("default")) or b"")
    assert default.members == ["admin"]
    again = run(*args, "--name", "west", "--shards", "1")
    assert again.exit_code == 0, again.output
    assert "already exists" in again.stdout
    kept = from_json(RegionConfig, read(url, keys.region_config()) or b"")
    assert (kept.name, len(kept.shards)) == ("east", 3)


def test_an_unreachable_store_is_one_line(tmp_path: Path) -> None:
    result = run(
        "region",
        "init",
        "--store",
        "etcd://127.0.0.1:1",
        "--admin-token-file",
        str(tmp_path / "admin.token"),
        env={"TETHER_STORE_TIMEOUT_S": "0.5"},
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("error: cannot create the region in etcd://127.0.0.1:1")
