"""`tether store status|ls|get` on an embedded SQLite store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.unit.cli.conftest import run, table_rows
from tether.store import keys, open_store


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def fill() -> None:
        async with open_store(url) as store:
            await store.put(keys.job("team-a", "web"), b'{"name": "web"}')
            await store.put(keys.job("team-a", "db"), b"not json")

    asyncio.run(fill())
    return url


def test_ls_lists_keys_with_their_revisions(store_url: str) -> None:
    result = run("store", "ls", keys.ROOT, "--store", store_url)
    assert result.exit_code == 0, result.output
    listed = [row[0] for row in table_rows(result.stdout)[1:]]
    assert listed == [keys.job("team-a", "db"), keys.job("team-a", "web")]


def test_ls_json_has_every_key_s_metadata(store_url: str) -> None:
    result = run("store", "ls", keys.ROOT, "--store", store_url, "-o", "json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["more"] is False
    web = next(kv for kv in printed["keys"] if kv["key"] == keys.job("team-a", "web"))
    assert web["bytes"] == len(b'{"name": "web"}')
    assert web["version"] == 1
    assert web["mod_revision"] <= printed["revision"]


def test_status_json_counts_keys_by_prefix(store_url: str) -> None:
    result = run("store", "status", "--store", store_url, "-o", "json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["keys"][keys.JOBS] == 2
    assert printed["revision"] >= 2


def test_get_prints_json_pretty_and_other_values_as_they_are(store_url: str) -> None:
    result = run("store", "get", keys.job("team-a", "web"), "--store", store_url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"name": "web"}
    result = run("store", "get", keys.job("team-a", "db"), "--store", store_url)
    assert result.stdout.strip() == "not json"
    missing = run("store", "get", keys.job("team-a", "nope"), "--store", store_url)
    assert missing.exit_code == 1
    assert "no key" in missing.stderr
