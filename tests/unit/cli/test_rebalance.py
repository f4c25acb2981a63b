"""`tether rebalance plan|run|show|ls` against a fake REST API."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.api import problem
from tests.unit.cli.conftest import FakeAPI, run
from tether.cli import rebalance

RUNS = "/admin/rebalance/runs"


def run_view(state: str, *, dry_run: bool = True, **fields: Any) -> dict[str, Any]:
    return {
        "id": "r-1",
        "dry_run": dry_run,
        "strategies": [],
        "requested_by": "admin",
        "state": state,
        "created_at": "2026-11-29T10:00:00Z",
        "updated_at": "2026-11-29T10:00:01Z",
        "moves": [],
        "before": {},
        "after": {},
        "gains": {},
        "deferred": {},
        "message": "",
        **fields,
    }


DONE = run_view(
    "done",
    moves=[
        {
            "job": "ads/b",
            "index": 0,
            "source": "m1",
            "target": "m0",
            "strategy": "idle",
            "why": "m1 of ads is 12% used",
            "operation": None,
        }
    ],
    before={"idle": 2.0, "stranded": 1.75},
    after={"idle": 0.0, "stranded": 0.75},
    gains={"idle": 2.0, "stranded": 1.0},
    deferred={"no-better-machine": 1},
)


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rebalance, "WAIT_POLL_S", 0.01)


def test_plan_asks_for_a_dry_run_and_prints_the_moves_and_gains(api: FakeAPI) -> None:
    api.on("POST", RUNS, httpx.Response(201, json=run_view("pending")))
    api.on(
        "GET",
        f"{RUNS}/r-1",
        httpx.Response(200, json=run_view("pending")),
        httpx.Response(200, json=DONE),
    )
    result = run("rebalance", "plan", "--strategy", "idle", "-s", "stranded")
    assert result.exit_code == 0, result.output
    [asked] = api.paths("POST", RUNS)
    assert json.loads(asked.content) == {"dry_run": True, "strategies": ["idle", "stranded"]}
    assert "would move 1 tasks" in result.stdout
    assert "ads/b" in result.stdout
    assert "m1 of ads is 12% used" in result.stdout
    assert "not moved: no-better-machine 1" in result.stdout
    [idle] = [line for line in result.stdout.splitlines() if line.strip().startswith("idle")]
    assert idle.split()[1:] == ["2", "0", "2"]


def test_run_asks_for_moves(api: FakeAPI) -> None:
    done = {**DONE, "dry_run": False}
    done["moves"] = [{**DONE["moves"][0], "operation": "rebalance-abc-t0"}]
    api.on("POST", RUNS, httpx.Response(201, json=run_view("pending", dry_run=False)))
    api.on("GET", f"{RUNS}/r-1", httpx.Response(200, json=done))
    result = run("rebalance", "run")
    assert result.exit_code == 0, result.output
    assert json.loads(api.paths("POST", RUNS)[0].content) == {"dry_run": False, "strategies": []}
    assert "moves 1 tasks" in result.stdout
    assert "rebalance-abc-t0" in result.stdout


def test_a_failed_run_exits_with_its_reason(api: FakeAPI) -> None:
    failed = run_view("failed", message="no allocator answered Suggest")
    api.on("POST", RUNS, httpx.Response(201, json=run_view("pending")))
    api.on("GET", f"{RUNS}/r-1", httpx.Response(200, json=failed))
    result = run("rebalance", "plan")
    assert result.exit_code == 1
    assert "no allocator answered Suggest" in result.stderr


def test_a_run_nobody_answers_times_out_and_says_where_to_look(api: FakeAPI) -> None:
    api.on("POST", RUNS, httpx.Response(201, json=run_view("pending")))
    api.on("GET", f"{RUNS}/r-1", httpx.Response(200, json=run_view("pending")))
    result = run("rebalance", "plan", "--timeout-s", "0.05")
    assert result.exit_code == 1
    assert "tether rebalance show r-1" in result.stderr


def test_without_a_rebalancer_the_apis_refusal_is_shown(api: FakeAPI) -> None:
    refusal = problem(409, "Conflict", "no rebalancer is running: start one")
    api.on("POST", RUNS, refusal)
    result = run("rebalance", "run")
    assert result.exit_code != 0
    assert "no rebalancer is running" in result.stderr
    assert "Traceback" not in result.output


def test_an_unknown_strategy_is_refused_before_anything_is_asked(api: FakeAPI) -> None:
    result = run("rebalance", "plan", "--strategy", "spread", "-s", "tidy")
    assert result.exit_code == 2
    assert "unknown strategy 'tidy'" in result.stderr
    assert "left-behind, spread, idle, stranded, hot-msbs" in result.stderr
    assert api.requests == []
