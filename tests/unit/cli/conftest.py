"""A fake REST API behind httpx.MockTransport for the user verbs, and a CLI runner."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from tests.support.api import problem
from tether.cli import common, jobs, tasks
from tether.cli.main import app

Reply = httpx.Response | Callable[[httpx.Request], httpx.Response]


@dataclass
class FakeAPI:
    """Answers `METHOD /path` with queued replies; the last reply of a route repeats."""

    routes: dict[tuple[str, str], list[Reply]] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)

    def on(self, method: str, path: str, *replies: Reply) -> None:
        self.routes[(method, path)] = list(replies)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        replies = self.routes.get((request.method, request.url.path))
        if not replies:
            return problem(404, "Not Found", f"no fake route {request.method} {request.url.path}")
        reply = replies.pop(0) if len(replies) > 1 else replies[0]
        return reply(request) if callable(reply) else reply

    def paths(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if (r.method, r.url.path) == (method, path)]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeAPI:
    """Every client the verbs build talks to a fresh FakeAPI; polling is made fast."""
    fake = FakeAPI()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "make_transport", lambda: httpx.MockTransport(fake.handle))
    monkeypatch.setattr(jobs, "WAIT_POLL_S", 0.01)
    monkeypatch.setattr(tasks, "FOLLOW_POLL_S", 0.01)
    return fake


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """Invoke `tether ARGS` with a wide terminal and a known URL and token."""
    environment: dict[str, str | None] = {
        "COLUMNS": "200",
        "TETHER_URL": "http://tether.test",
        "TETHER_TOKEN": "tok",
    }
    return CliRunner().invoke(app, list(args), env={**environment, **(env or {})})


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row (header first) of the rich tables printed in `text`."""
    return [
        [cell.strip() for cell in re.split("[│┃]", line)[1:-1]]
        for line in text.splitlines()
        if line[:1] in ("│", "┃")
    ]
