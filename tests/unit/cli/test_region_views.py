"""`tether machine ls` and `tether status` against a fake REST API."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.api import machine, region, shard
from tests.support.region import write_region_file
from tests.unit.cli.conftest import FakeAPI, run, table_rows


def test_machine_ls(api: FakeAPI) -> None:
    machines = [machine("m-2", "down", False), machine("m-1", "up", True, 1500, 1024)]
    api.on("GET", "/v1/machines", httpx.Response(200, json={"machines": machines}))
    result = run("machine", "ls")
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout) == [
        [
            "id",
            "dc/msb/rack",
            "state",
            "tasks",
            "cpu",
            "memory MiB",
            "heartbeat",
        ],
        ["m-1", "dc1/msb2/r3", "up", "3", "1.5/4", "1024/4096", "yes"],
        ["m-2", "dc1/msb2/r3", "down", "0", "0/4", "0/4096", "no"],
    ]


def test_machine_ls_without_machines(api: FakeAPI) -> None:
    api.on("GET", "/v1/machines", httpx.Response(200, json={"machines": []}))
    result = run("machine", "ls")
    assert (result.exit_code, result.stdout) == (0, "no machines\n")


def test_status(api: FakeAPI) -> None:
    leader = {"leader": "host:11:aa", "leader_since": "2025-01-02T03:04:05Z"}
    shards = [
        {"shard": "shard-0", **leader, "entitlements": ["default", "team-a"]},
        {"shard": "shard-1", "leader": None, "leader_since": None, "entitlements": []},
    ]
    allocator = {
        "id": "allocator-0",
        "address": "127.0.0.1:7100",
        "pid": 12,
        "since": "2025-01-02T03:04:00Z",
    }
    answer = region(
        shards=shards,
        allocators=[allocator],
        machines={"total": 4, "up": 3, "down": 1},
        jobs=2,
        tasks={"running": 5, "pending": 1},
    )
    api.on("GET", "/v1/region", httpx.Response(200, json=answer))
    result = run("status")
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines()]
    assert ["region", "local"] in lines
    assert ["machines", "4", "(up=3", "down=1)"] in lines
    assert ["jobs", "2"] in lines
    assert ["tasks", "running=5", "pending=1"] in lines
    rows = table_rows(result.stdout)
    assert ["shard-0", "host:11:aa", "2025-01-02 03:04:05", "default, team-a"] in rows
    assert ["shard-1", "none", "-", "-"] in rows
    assert ["allocator-0", "127.0.0.1:7100", "12", "2025-01-02 03:04:00"] in rows


def test_status_without_allocators(api: FakeAPI) -> None:
    api.on("GET", "/v1/region", httpx.Response(200, json=region()))
    result = run("status")
    assert result.exit_code == 0, result.output
    assert "no allocator is running" in result.stdout
    assert ["machines", "0", "(-)"] in [line.split() for line in result.stdout.splitlines()]


def test_shard_ls_warns_of_a_shard_whose_entitlements_have_no_leader(api: FakeAPI) -> None:
    warning = "shard 'shard-1' holds entitlements ads but has no leader: ..."
    shards = [
        shard("shard-0", "h:1:a", entitlements=["default"]),
        shard("shard-1", entitlements=["ads"], warning=warning),
    ]
    api.on("GET", "/admin/shards", httpx.Response(200, json={"shards": shards}))
    result = run("shard", "ls")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: {warning}"]


def test_status_lists_the_services_tether_up_restarted_or_left_dead(
    api: FakeAPI, tmp_path: Path
) -> None:
    api.on("GET", "/v1/region", httpx.Response(200, json=region()))
    write_region_file(
        tmp_path,
        processes={"frontend": 10, "agent-m1": 21, "health": 12},
        restarts={"frontend": 0, "agent-m1": 2, "health": 0},
        dead=["health"],
    )
    result = run("status", "--dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "3, 2 running, 1 restarted" in result.stdout
    rows = [line.replace("│", " ").split() for line in result.stdout.splitlines()]
    assert ["agent-m1", "21", "2", "running"] in rows
    assert ["health", "12", "0", "dead"] in rows
    assert not any(row[:1] == ["frontend"] for row in rows)


def test_status_warns_of_a_region_file_it_cannot_read_and_shows_the_rest(
    api: FakeAPI, tmp_path: Path
) -> None:
    api.on("GET", "/v1/region", httpx.Response(200, json=region()))
    (tmp_path / "region.json").write_text('{"processes": {}}')
    result = run("status", "--dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert ["region", "local"] in [line.split() for line in result.stdout.splitlines()]
    assert "services" not in result.stdout
    [warning] = result.stderr.splitlines()
    assert warning.startswith(
        f"warning: {tmp_path / 'region.json'} is not a region file written by `tether up`: "
        "pid: Field required;"
    )
