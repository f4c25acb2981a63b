"""`tether queue ls` against a fake REST API."""

from __future__ import annotations

from typing import Any

import httpx

from tests.unit.cli.conftest import FakeAPI, run, table_rows
from tether.cli.queues import duration_text
from tether.model.resources import resources_text
from tether.sdk import ResourcesView


def use(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "parent": "org",
        "weight": 2,
        "quota": {"cpu": 4000, "memory_mib": 1024},
        "reserved": {"cpu": 5000, "memory_mib": 512},
        "borrowed": {"cpu": 1000},
        "lent": {},
        "dominant_share": 0.3125,
        "queued": 3,
        "admitted": 2,
        **fields,
    }


def test_ls_shows_every_entitlement_s_use(api: FakeAPI) -> None:
    api.on("GET", "/v1/queues", httpx.Response(200, json={"queues": [use("ml")]}))
    result = run("queue", "ls")
    assert result.exit_code == 0, result.output
    header, row = table_rows(result.stdout)
    assert header[0] == "entitlement"
    assert row[:2] == ["ml", "org"]
    assert "cpu 5000m, mem 512Mi / cpu 4000m, mem 1024Mi" in result.stdout
    assert row[-3:] == ["0.31", "3", "2"]


def test_ls_of_an_entitlement_lists_its_queue_in_order(api: FakeAPI) -> None:
    jobs = [
        {
            "position": place,
            "job": f"ml/j{place}",
            "priority": 100,
            "start_deadline": None,
            "queued_at": "2030-01-01T00:00:00Z",
            "waiting_s": 3725.0,
            "tasks": 4,
            "least_tasks": 2 if place == 1 else 4,
            "requested": {"gpus": 4},
            "reason": "short" if place == 1 else "",
        }
        for place in (1, 2)
    ]
    queue = {
        "entitlement": "ml",
        "use": use("ml"),
        "reported_at": None,
        "total": 5,
        "offset": 0,
        "jobs": jobs,
    }
    api.on("GET", "/v1/queues/ml", httpx.Response(200, json=queue))
    result = run("queue", "ls", "ml")
    assert result.exit_code == 0, result.output
    assert "ml: reserves cpu 5000m, mem 512Mi of cpu 4000m, mem 1024Mi" in result.stdout
    header, first, second = table_rows(result.stdout)
    assert header[:3] == ["#", "job", "priority"]
    assert first == ["1", "ml/j1", "100", "-", "1h 2m", "2-4", "gpus 4"]
    assert "ml/j1 waits because: short" in result.stdout
    assert second[:2] == ["2", "ml/j2"]
    assert "3 more job(s) wait after these" in result.stdout
    empty: dict[str, Any] = {
        "entitlement": "ml",
        "use": None,
        "reported_at": None,
        "total": 0,
        "offset": 0,
        "jobs": [],
    }
    api.on("GET", "/v1/queues/ml", httpx.Response(200, json=empty))
    assert "no jobs wait in ml's queue" in run("queue", "ls", "ml").stdout


def test_texts() -> None:
    assert resources_text(ResourcesView()) == "0"
    assert resources_text(ResourcesView(cpu=1, extra={"fpga": 2})) == "cpu 1m, fpga 2"
    assert [duration_text(s) for s in (5, 65, 3700)] == ["5s", "1m 5s", "1h 1m"]
