"""`tether job ...` against a fake REST API."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.api import JOB, problem, task
from tests.unit.cli.conftest import FakeAPI, run, table_rows
from tether.cli.explain import ordinal


def tasks(*items: dict[str, object]) -> httpx.Response:
    return httpx.Response(200, json={"tasks": list(items)})


@pytest.fixture
def yaml_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "web.yaml"
    spec.write_text("name: web\nentitlement: team-a\ncount: 2\n")
    return spec


def test_submit_yaml_prints_the_handle(api: FakeAPI, yaml_spec: Path) -> None:
    api.on("POST", "/v1/jobs", httpx.Response(201, json=JOB))
    result = run("job", "submit", str(yaml_spec), "--idempotency-key", "k-1")
    assert result.exit_code == 0, result.output
    assert result.stdout == "team-a/web\n"
    [request] = api.requests
    assert request.headers["Content-Type"] == "application/yaml"
    assert request.headers["Idempotency-Key"] == "k-1"
    assert request.headers["Authorization"] == "Bearer tok"
    assert request.content == yaml_spec.read_bytes()


def test_submit_json_sends_json(api: FakeAPI, tmp_path: Path) -> None:
    spec = tmp_path / "web.JSON"
    spec.write_text(json.dumps({"name": "web"}))
    api.on("POST", "/v1/jobs", httpx.Response(201, json=JOB))
    result = run("job", "submit", str(spec))
    assert result.exit_code == 0, result.output
    assert api.requests[0].headers["Content-Type"] == "application/json"
    # One made up by the SDK, so that a dropped connection can be retried safely.
    assert api.requests[0].headers["Idempotency-Key"].startswith("sdk-")


def test_submit_refuses_missing_files_and_unknown_formats(api: FakeAPI, tmp_path: Path) -> None:
    missing = run("job", "submit", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2
    assert "does not exist" in missing.stderr
    text = tmp_path / "web.txt"
    text.write_text("name: web")
    unknown = run("job", "submit", str(text))
    assert unknown.exit_code == 1
    assert "*.yaml, *.yml or *.json" in unknown.stderr
    assert api.requests == []


def test_submit_wait_returns_once_every_task_runs(api: FakeAPI, yaml_spec: Path) -> None:
    api.on("POST", "/v1/jobs", httpx.Response(201, json=JOB))
    api.on(
        "GET",
        "/v1/jobs/team-a/web/tasks",
        tasks(),
        tasks(task(0, "pending"), task(1, "pending")),
        tasks(task(0, "running", "m-1"), task(1, "placed", "m-2")),
        tasks(task(0, "running", "m-1"), task(1, "running", "m-2")),
    )
    result = run("job", "submit", str(yaml_spec), "--wait", "--timeout", "10")
    assert result.exit_code == 0, result.output
    assert result.stdout == "team-a/web\n"
    assert len(api.paths("GET", "/v1/jobs/team-a/web/tasks")) == 4
    assert "2/2" in result.stderr


def test_submit_wait_times_out_listing_tasks_that_do_not_run(api: FakeAPI, yaml_spec: Path) -> None:
    api.on("POST", "/v1/jobs", httpx.Response(201, json={**JOB, "count": 3}))
    api.on(
        "GET",
        "/v1/jobs/team-a/web/tasks",
        tasks(
            task(0, "running", "m-1"),
            task(1, "pending", message="no machine fits: memory: need 9999 MiB, 4096 free"),
        ),
    )
    result = run("job", "submit", str(yaml_spec), "--wait", "--timeout", "0.05")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert "error: team-a/web: 1 of 3 tasks running after 0.05 s" in lines
    assert "  task 1: pending: no machine fits: memory: need 9999 MiB, 4096 free" in lines
    assert "  task 2: not created yet" in lines
    assert "Traceback" not in result.output


def test_ls_shows_a_table_and_filters(api: FakeAPI) -> None:
    other = {
        **JOB,
        "handle": "team-b/batch",
        "count": 4,
        "running": 0,
        "generation": 3,
        "deleting": True,
        "tasks": {"killed": 4},
        "admission": {
            "job": "team-b/batch",
            "state": "queued",
            "priority": 100,
            "queued_at": "2030-01-01T00:00:00Z",
            "task_resources": {"cpu": 100},
            "tasks": 4,
            "least_tasks": 4,
            "updated_at": "2030-01-01T00:00:00Z",
        },
    }
    api.on("GET", "/v1/jobs", httpx.Response(200, json={"jobs": [JOB, other]}))
    result = run("job", "ls", "--entitlement", "team-a")
    assert result.exit_code == 0, result.output
    assert api.requests[0].url.params["entitlement"] == "team-a"
    header, *rows = table_rows(result.stdout)
    assert header == [
        "handle",
        "count",
        "running",
        "admission",
        "generation",
        "tasks",
        "deleting",
    ]
    assert rows == [
        ["team-a/web", "2", "1", "-", "1", "pending=1 running=1", ""],
        ["team-b/batch", "4", "0", "queued 0/4", "3", "killed=4", "yes"],
    ]


def test_ls_without_jobs(api: FakeAPI) -> None:
    api.on("GET", "/v1/jobs", httpx.Response(200, json={"jobs": []}))
    result = run("job", "ls")
    assert (result.exit_code, result.stdout) == (0, "no jobs\n")
    assert "entitlement" not in api.requests[0].url.params


def test_show_prints_the_job_and_its_tasks(api: FakeAPI) -> None:
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=JOB))
    api.on(
        "GET",
        "/v1/jobs/team-a/web/tasks",
        tasks(task(1, "pending", message="quota exceeded"), task(0, "running", "m-1")),
    )
    result = run("job", "show", "team-a/web")
    assert result.exit_code == 0, result.output
    assert "hello 1.0" in result.stdout
    assert "python -m http.server" in result.stdout
    rows = table_rows(result.stdout)
    assert rows == [
        ["index", "state", "machine", "pid", "restarts", "attempt", "message"],
        ["0", "running", "m-1", "1000", "0", "1", ""],
        ["1", "pending", "-", "-", "0", "0", "quota exceeded"],
    ]


def test_show_a_job_without_tasks(api: FakeAPI) -> None:
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=JOB))
    api.on("GET", "/v1/jobs/team-a/web/tasks", tasks())
    result = run("job", "show", "team-a/web")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("no tasks yet\n")
    assert table_rows(result.stdout) == []


def test_show_says_where_a_job_is_in_its_queue(api: FakeAPI) -> None:
    queued = {
        **JOB,
        "queue_position": 2,
        "admission": {
            "job": "team-a/web",
            "state": "queued",
            "priority": 100,
            "queued_at": "2030-01-01T00:00:00Z",
            "task_resources": {"cpu": 100},
            "tasks": 2,
            "least_tasks": 2,
            "reason": "",
            "updated_at": "2030-01-01T00:00:00Z",
        },
    }
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=queued))
    api.on("GET", "/v1/jobs/team-a/web/tasks", tasks())
    result = run("job", "show", "team-a/web")
    assert result.exit_code == 0, result.output
    assert "queued, 2nd in line" in result.stdout
    preempted = {
        **queued,
        "queue_position": None,
        "admission": queued["admission"]
        | {"state": "admitted", "admitted": 1, "preemptions": 1, "preempted_by": "team-a/ml"},
    }
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=preempted))
    result = run("job", "show", "team-a/web")
    assert "admitted, 1 of 2 tasks; preempted 1 time(s), last for team-a/ml" in result.stdout
    # Scaled up: the task it gained waits in the queue, and the reason says why.
    scaled = {
        **queued,
        "queue_position": 1,
        "admission": queued["admission"]
        | {"state": "admitted", "admitted": 1, "reason": "not enough quota for 1 task(s)"},
    }
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=scaled))
    result = run("job", "show", "team-a/web")
    assert (
        "admitted, 1 of 2 tasks, the others 1st in line: not enough quota for 1 task(s)"
        in result.stdout
    )


@pytest.mark.parametrize(
    ("place", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (22, "22nd")]
)
def test_ordinals(place: int, text: str) -> None:
    assert ordinal(place) == text


def test_show_an_unknown_job(api: FakeAPI) -> None:
    api.on("GET", "/v1/jobs/team-a/gone", problem(404, "Job not found", "no job team-a/gone"))
    result = run("job", "show", "team-a/gone")
    assert result.exit_code == 1
    assert result.stderr == "error: 404 Job not found: no job team-a/gone\n"


def test_scale(api: FakeAPI) -> None:
    api.on(
        "POST",
        "/v1/jobs/team-a/web/scale",
        httpx.Response(200, json={**JOB, "count": 5, "generation": 2}),
    )
    result = run("job", "scale", "team-a/web", "5")
    assert result.exit_code == 0, result.output
    assert json.loads(api.requests[0].content) == {"count": 5}
    assert result.stdout == "team-a/web: count 5, generation 2\n"


def test_scale_refuses_a_count_below_one(api: FakeAPI) -> None:
    result = run("job", "scale", "team-a/web", "0")
    assert result.exit_code == 2
    assert api.requests == []


def test_rm_without_wait(api: FakeAPI) -> None:
    api.on("DELETE", "/v1/jobs/team-a/web", httpx.Response(202, json={**JOB, "deleting": True}))
    result = run("job", "rm", "team-a/web")
    assert (result.exit_code, result.stdout) == (0, "deleting team-a/web\n")
    assert [r.method for r in api.requests] == ["DELETE"]


def test_rm_wait_polls_until_the_job_is_gone(api: FakeAPI) -> None:
    api.on("DELETE", "/v1/jobs/team-a/web", httpx.Response(202, json={**JOB, "deleting": True}))
    deleting = httpx.Response(200, json={**JOB, "deleting": True})
    api.on("GET", "/v1/jobs/team-a/web", deleting, deleting, problem(404, "Job not found"))
    result = run("job", "rm", "team-a/web", "--wait")
    assert result.exit_code == 0, result.output
    assert result.stdout == "deleted team-a/web\n"
    assert len(api.paths("GET", "/v1/jobs/team-a/web")) == 3


def test_rm_wait_times_out(api: FakeAPI) -> None:
    api.on("DELETE", "/v1/jobs/team-a/web", httpx.Response(202, json=JOB))
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json={**JOB, "deleting": True}))
    result = run("job", "rm", "team-a/web", "--wait", "--timeout", "0.05")
    assert result.exit_code == 1
    assert "team-a/web still exists after 0.05 s" in result.stderr


def test_rm_wait_reports_other_errors(api: FakeAPI) -> None:
    api.on("DELETE", "/v1/jobs/team-a/web", httpx.Response(202, json=JOB))
    api.on("GET", "/v1/jobs/team-a/web", problem(403, "Forbidden", "not a member of team-a"))
    result = run("job", "rm", "team-a/web", "--wait")
    assert result.exit_code == 1
    assert "error: 403 Forbidden: not a member of team-a" in result.stderr


def test_update_suspends_and_resumes_a_job(api: FakeAPI) -> None:
    api.on("PATCH", "/v1/jobs/team-a/web", httpx.Response(200, json=JOB))
    suspended = run("job", "update", "team-a/web", "--suspend")
    assert suspended.exit_code == 0, suspended.output
    assert suspended.stdout == "team-a/web: suspended\n"
    resumed = run("job", "update", "team-a/web", "--resume")
    assert resumed.stdout == "team-a/web: resumed\n"
    bodies = [json.loads(request.content) for request in api.requests]
    assert bodies == [{"suspended": True}, {"suspended": False}]
    nothing = run("job", "update", "team-a/web")
    assert nothing.exit_code == 1
    assert "give --version, --suspend or --resume" in nothing.stderr
    waiting = run("job", "update", "team-a/web", "--resume", "--wait")
    assert "--wait waits for a --version to roll out" in waiting.stderr
    assert len(api.requests) == 2
