"""`tether events` against a fake frontend's event stream."""

from __future__ import annotations

import json

import httpx

from tests.support.api import problem
from tests.unit.cli.conftest import FakeAPI, run


def message(data: dict[str, object], *, event: str | None = None, at: int | None = None) -> str:
    head = (f"event: {event}\n" if event else "") + (f"id: {at}\n" if at is not None else "")
    return f"{head}data: {json.dumps(data)}\n\n"


def started(revision: int, index: int) -> dict[str, object]:
    return {
        "revision": revision,
        "kind": "task.started",
        "at": "2026-01-01T10:11:12Z",
        "entitlement": "default",
        "job": "default/hello",
        "task": index,
        "attempt": 1,
        "machine": "m2",
        "state": "running",
        "detail": f"pid {100 + index}",
    }


GAP = {
    "type": "about:blank",
    "title": "Events no longer kept",
    "status": 410,
    "detail": "the events after revision 3 are no longer kept",
    "last_event_id": 3,
    "kept_after": 9,
}
"""An EventGap: the events after revision 3 are gone."""


def stream(*messages: str) -> httpx.Response:
    body = "retry: 1000\n: events after revision 0\n\n" + "".join(messages)
    return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


def test_events_are_a_line_each(api: FakeAPI) -> None:
    api.on("GET", "/v1/events", stream(message(started(7, 0)), message(started(7, 1), at=7)))
    result = run("events", "--job", "default/hello", "--kind", "task")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "10:11:12  task.started            default/hello/0 on m2  pid 100",
        "10:11:12  task.started            default/hello/1 on m2  pid 101",
    ]
    [request] = api.requests
    assert request.url.params["follow"] == "false"
    assert request.url.params["job"] == "default/hello"
    assert request.url.params.get_list("kind") == ["task"]


def test_json_is_one_object_a_line_gap_and_snapshot_included(api: FakeAPI) -> None:
    snapshot = {"revision": 9, "objects": [{"what": "machine", "machine": "m1", "state": "up"}]}
    api.on(
        "GET",
        "/v1/events",
        stream(message(GAP, event="gap"), message(snapshot, event="snapshot", at=9)),
    )
    result = run("events", "--since", "3", "-o", "json")
    assert result.exit_code == 0, result.output
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["kind"] for line in printed] == ["gap", "snapshot"]
    assert printed[1]["objects"][0]["machine"] == "m1"
    assert api.requests[0].headers["Last-Event-ID"] == "3"


def test_a_gap_warns_and_prints_the_state(api: FakeAPI) -> None:
    snapshot = {
        "revision": 9,
        "objects": [{"what": "task-status", "job": "a/b", "task": 0, "state": "running"}],
    }
    api.on(
        "GET",
        "/v1/events",
        stream(message(GAP, event="gap"), message(snapshot, event="snapshot", at=9)),
    )
    result = run("events", "--since", "3")
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: the events after revision 3 are no longer kept")
    assert result.stdout.splitlines() == ["state at revision 9:", "  task-status a/b/0 running"]


def test_nothing_kept_says_how_to_follow(api: FakeAPI) -> None:
    api.on("GET", "/v1/events", stream())
    result = run("events")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "follow new ones with -f" in result.stderr


def test_a_refused_filter_is_one_line(api: FakeAPI) -> None:
    api.on("GET", "/v1/events", problem(422, "Validation failed", "unknown event kind 'nope'"))
    result = run("events", "--kind", "nope")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == ["error: 422 Validation failed: unknown event kind 'nope'"]


def test_a_malformed_job_is_refused_before_any_request(api: FakeAPI) -> None:
    result = run("events", "--job", "no-slash")
    assert result.exit_code == 2
    assert api.requests == []
