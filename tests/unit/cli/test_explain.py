"""`tether job explain` against a fake REST API."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.api import JOB, problem
from tests.unit.cli.conftest import FakeAPI, run, table_rows
from tether.cli.explain import index_ranges

PATH = "/v1/jobs/team-a/web/placement"
FAST = "rack_type == fast"

PLACEMENT: dict[str, Any] = {
    "job": "team-a/web",
    "summary": "2 of 5 machines fit",
    "machines_considered": 5,
    "machines_fitting": 2,
    "entitlement_machines": 3,
    "rules": [
        {"rule": "state up", "machines_rejected": 0, "detail": ""},
        {"rule": "resources.memory", "machines_rejected": 3, "detail": "closest miss: 512 MiB"},
    ],
    "preferences": [
        {"rule": FAST, "weight": 2, "machines_matching": 1},
        {"rule": "os == linux", "weight": 1, "machines_matching": 2},
    ],
    "chosen": [
        {
            "machine": "m1",
            "tasks": [0, 1, 2, 3, 7],
            "rank": 1,
            "preferences": ["rack_type == fast"],
        },
        {"machine": "m2", "tasks": [4], "rank": 0, "preferences": []},
    ],
    "a_future_field": 1,
}
"""A PlacementView as the frontend sends it, plus a field a newer frontend might add."""

UNPLACEABLE: dict[str, Any] = {
    **PLACEMENT,
    "summary": "0 of 5 machines fit: resources.memory rejected 5",
    "machines_fitting": 0,
    "rules": [{"rule": "resources.memory", "machines_rejected": 5, "detail": "needs 64 GiB"}],
    "preferences": [],
    "chosen": [],
}


@pytest.fixture(autouse=True)
def job(api: FakeAPI) -> None:
    """The job explained, admitted (older than admission: no record)."""
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=JOB))


def queued_at(position: int) -> dict[str, Any]:
    return {
        "position": position,
        "job": f"team-a/j{position}",
        "priority": 100,
        "start_deadline": None,
        "queued_at": "2030-01-01T00:00:00Z",
        "waiting_s": 65.0,
        "tasks": 2,
        "least_tasks": 2,
        "requested": {"cpu": 2000},
        "reason": "not enough quota for 2 task(s): cpu: need 2000 millicores, 500 free; "
        "preempting would not help: no job it may preempt"
        if position == 1
        else "",
    }


def test_explain_says_why_a_queued_job_waits(api: FakeAPI) -> None:
    admission = {
        "job": "team-a/web",
        "state": "queued",
        "priority": 100,
        "queued_at": "2030-01-01T00:00:00Z",
        "task_resources": {"cpu": 1000},
        "tasks": 2,
        "least_tasks": 2,
        "updated_at": "2030-01-01T00:00:00Z",
    }
    job = JOB | {"admission": admission, "queue_position": 8}
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=job))
    waiting = [queued_at(place) for place in range(1, 6)]
    queue = {
        "entitlement": "team-a",
        "use": None,
        "reported_at": None,
        "total": 9,
        "offset": 0,
        "jobs": waiting,
    }
    api.on("GET", "/v1/queues/team-a", httpx.Response(200, json=queue))
    api.on("GET", PATH, httpx.Response(200, json=UNPLACEABLE))
    result = run("job", "explain", "team-a/web")
    assert result.exit_code == 0, result.output
    assert "team-a/web waits in team-a's queue, 8th in line" in result.stdout
    assert "ahead of it: team-a/j1, team-a/j2, team-a/j3, team-a/j4, team-a/j5 and 2 more" in (
        result.stdout
    )
    # Only the few jobs shown are asked for, however long the queue.
    [asked] = api.paths("GET", "/v1/queues/team-a")
    assert asked.url.params["limit"] == "5"
    assert "cpu: need 2000 millicores, 500 free" in result.stdout
    assert "preempting would not help" in result.stdout


def test_explain_says_why_the_tasks_a_scaled_up_job_gained_wait(api: FakeAPI) -> None:
    reason = "not enough quota for 1 task(s): cpu: need 400 millicores, 200 free"
    admission = {
        "job": "team-a/web",
        "state": "admitted",
        "priority": 100,
        "queued_at": "2030-01-01T00:00:00Z",
        "task_resources": {"cpu": 400},
        "tasks": 2,
        "least_tasks": 2,
        "admitted": 1,
        "reason": reason,
        "updated_at": "2030-01-01T00:00:00Z",
    }
    job = JOB | {"admission": admission, "queue_position": 1}
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=job))
    entry = queued_at(1) | {"job": "team-a/web", "admitted": 1, "reason": reason}
    queue = {
        "entitlement": "team-a",
        "use": None,
        "reported_at": None,
        "total": 1,
        "offset": 0,
        "jobs": [entry],
    }
    api.on("GET", "/v1/queues/team-a", httpx.Response(200, json=queue))
    api.on("GET", PATH, httpx.Response(200, json=PLACEMENT))
    result = run("job", "explain", "team-a/web")
    assert result.exit_code == 0, result.output
    assert (
        "team-a/web waits in team-a's queue for 1 more task(s) (1 of 2 admitted), 1st in line"
        in result.stdout
    )
    assert f"it waits because: {reason}" in result.stdout


def test_explain_prints_the_summary_rules_preferences_and_chosen_machines(api: FakeAPI) -> None:
    api.on("GET", PATH, httpx.Response(200, json=PLACEMENT))
    result = run("job", "explain", "team-a/web")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "team-a/web: 2 of 5 machines fit"
    assert lines[1] == "machines: 5 considered, 2 fitting, 3 in the entitlement"
    assert table_rows(result.stdout) == [
        ["rule", "rejected", "detail"],
        ["state up", "0", ""],
        ["resources.memory", "3", "closest miss: 512 MiB"],
        ["preference", "weight", "matching"],
        ["rack_type == fast", "2", "1"],
        ["os == linux", "1", "2"],
        ["machine", "tasks", "rank", "preferences"],
        ["m1", "0-3,7", "1", "rack_type == fast"],
        ["m2", "4", "-", ""],
    ]
    # The placement, and the job (not waiting: no queue to read).
    assert [request.url.path for request in api.requests] == [PATH, "/v1/jobs/team-a/web"]
    assert all(r.headers["Authorization"] == "Bearer tok" for r in api.requests)


def test_explain_without_preferences_or_chosen_machines(api: FakeAPI) -> None:
    api.on("GET", PATH, httpx.Response(200, json=UNPLACEABLE))
    result = run("job", "explain", "team-a/web")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("team-a/web: 0 of 5 machines fit: resources.memory rejected 5")
    assert result.stdout.endswith("no machine holds tasks of this job\n")
    assert table_rows(result.stdout) == [
        ["rule", "rejected", "detail"],
        ["resources.memory", "5", "needs 64 GiB"],
    ]


def test_rules_that_rejected_nothing_are_dim(api: FakeAPI) -> None:
    api.on("GET", PATH, httpx.Response(200, json=PLACEMENT))
    result = run("job", "explain", "team-a/web", env={"FORCE_COLOR": "1", "NO_COLOR": None})
    assert result.exit_code == 0, result.output
    [state_up] = [line for line in result.stdout.splitlines() if "state up" in line]
    [memory] = [line for line in result.stdout.splitlines() if "resources.memory" in line]
    dim = "\x1b[2m"
    assert dim in state_up
    assert dim not in memory


def test_explain_json_prints_the_view(api: FakeAPI) -> None:
    api.on("GET", PATH, httpx.Response(200, json=PLACEMENT))
    result = run("job", "explain", "team-a/web", "-o", "json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == {key: value for key, value in PLACEMENT.items() if key != "a_future_field"}


@pytest.mark.parametrize(
    ("status", "title", "detail"),
    [
        (404, "Not found", "job 'team-a/web' does not exist"),
        (503, "Service unavailable", "no allocator is registered under /tether/v1/allocators/"),
        (502, "Unexpected answer from an allocator", "the allocator failed (INTERNAL): boom"),
    ],
)
def test_explain_errors_are_one_line_without_a_traceback(
    api: FakeAPI, status: int, title: str, detail: str
) -> None:
    api.on("GET", PATH, problem(status, title, detail))
    result = run("job", "explain", "team-a/web")
    assert result.exit_code == 1
    assert result.stderr == f"error: {status} {title}: {detail}\n"
    assert result.stdout == ""


def test_explain_refuses_a_malformed_handle_before_any_request(api: FakeAPI) -> None:
    result = run("job", "explain", "no-slash")
    assert result.exit_code == 2
    assert api.requests == []


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        ([], ""),
        ([5], "5"),
        ([7, 0, 2, 1, 3], "0-3,7"),
        ([1, 2, 4, 5, 9], "1-2,4-5,9"),
        ([3, 3, 4], "3-4"),
    ],
)
def test_index_ranges(indexes: list[int], text: str) -> None:
    assert index_ranges(indexes) == text
