"""`tether task logs` against a fake REST API, and how --follow finds the new bytes."""

from __future__ import annotations

import httpx
import pytest

from tests.support.api import problem
from tests.unit.cli.conftest import FakeAPI, run
from tether.cli.tasks import new_bytes, parse_task

LOGS = "/v1/jobs/team-a/web/tasks/2/logs"


def text(body: bytes) -> httpx.Response:
    return httpx.Response(200, content=body, headers={"content-type": "text/plain"})


def test_logs_prints_the_tail_of_the_chosen_stream(api: FakeAPI) -> None:
    api.on("GET", LOGS, text(b"line 1\nline 2\n"))
    result = run("task", "logs", "team-a/web/2", "--stream", "stderr", "--tail-bytes", "10")
    assert result.exit_code == 0, result.output
    assert result.stdout == "line 1\nline 2\n"
    assert dict(api.requests[0].url.params) == {"stream": "stderr", "tail_bytes": "10"}


def test_logs_defaults_to_stdout_and_64_kib(api: FakeAPI) -> None:
    api.on("GET", LOGS, text(b""))
    assert run("task", "logs", "team-a/web/2").exit_code == 0
    assert dict(api.requests[0].url.params) == {"stream": "stdout", "tail_bytes": "65536"}


def test_logs_refuses_an_unknown_stream(api: FakeAPI) -> None:
    result = run("task", "logs", "team-a/web/2", "--stream", "stdin")
    assert result.exit_code == 2
    assert api.requests == []


def test_logs_of_a_task_without_a_machine(api: FakeAPI) -> None:
    # What the frontend answers for a task that is not placed yet (frontend/api/tasks.py).
    detail = "task team-a/web/2 has no machine yet (state 'pending'), so it has no logs"
    not_found = problem(404, "Not found", detail, type="urn:tether:problem:not-found")
    api.on("GET", LOGS, not_found)
    result = run("task", "logs", "team-a/web/2")
    assert result.exit_code == 1
    assert result.stderr == f"error: 404 Not found: {detail}\n"


def test_follow_prints_only_new_bytes_until_interrupted(api: FakeAPI) -> None:
    def interrupt(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt

    # A 8-byte tail window sliding over a growing log.
    api.on(
        "GET",
        LOGS,
        text(b"abc\n"),
        text(b"abc\n"),
        text(b"abc\nde\n"),
        text(b"c\nde\nfg\n"),
        interrupt,
    )
    result = run("task", "logs", "team-a/web/2", "--follow", "--tail-bytes", "8")
    assert result.exit_code == 0, result.output
    assert result.stdout == "abc\nde\nfg\n"
    assert len(api.requests) == 5


def test_parse_task() -> None:
    assert parse_task("team-a/web/12") == ("team-a/web", 12)
    for bad in (
        "team-a/web",
        "team-a/web/",
        "team-a/web/x",
        "team-a/web/\u0661",
        "web/0",
        "A/web/0",
    ):
        with pytest.raises(ValueError, match="invalid"):
            parse_task(bad)


@pytest.mark.parametrize(
    ("previous", "latest", "new"),
    [
        (b"", b"hello", b"hello"),
        (b"hello", b"hello", b""),
        (b"hello", b"hello world", b" world"),
        # The tail window slid: the start of `previous` fell out of `latest`.
        (b"abcdef", b"defghi", b"ghi"),
        (b"aaaa", b"aaab", b"b"),
        # Nothing in common: the log was replaced (a new attempt) or grew by more than a tail.
        (b"abc", b"xyz", b"xyz"),
        (b"abc", b"", b""),
    ],
)
def test_new_bytes(previous: bytes, latest: bytes, new: bytes) -> None:
    assert new_bytes(previous, latest) == new
