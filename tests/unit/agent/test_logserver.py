"""The agent's log endpoint, through FastAPI's ASGI interface (no sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tether.agent.logserver import log_app
from tether.agent.workdir import TaskRef, WorkDir

TASK = TaskRef("ent", "job", 0)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    work = WorkDir(tmp_path)
    for attempt, text in ((1, b"first attempt\n"), (2, b"second attempt\n")):
        files = work.attempt(TASK, attempt)
        files.dir.mkdir(parents=True)
        files.log("stdout").write_bytes(text)
    work.attempt(TASK, 2).log("stderr").write_bytes(b"oops\n")
    transport = httpx.ASGITransport(app=log_app(work))
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as opened:
        yield opened


async def test_latest_attempt_by_default(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/tasks/ent/job/0/logs")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert response.headers["x-tether-attempt"] == "2"
    assert response.text == "second attempt\n"


async def test_stream_attempt_and_tail(client: httpx.AsyncClient) -> None:
    stderr = await client.get("/v1/tasks/ent/job/0/logs", params={"stream": "stderr"})
    assert stderr.text == "oops\n"
    first = await client.get("/v1/tasks/ent/job/0/logs", params={"attempt": 1, "tail_bytes": 8})
    assert first.text == "attempt\n"
    # Attempt 1 has no stderr yet: an empty log, not an error.
    empty = await client.get("/v1/tasks/ent/job/0/logs?attempt=1&stream=stderr")
    assert (empty.status_code, empty.text) == (200, "")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/tasks/ent/job/1/logs",
        "/v1/tasks/ent/other/0/logs",
        "/v1/tasks/ent/job/0/logs?attempt=3",
        "/v1/tasks/ent/%2E%2E/0/logs",
        "/v1/tasks/ent/Not_A_Name/0/logs",
    ],
)
async def test_unknown_task_or_attempt_is_404(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 404


@pytest.mark.parametrize("query", ["stream=stdin", "tail_bytes=-1", "tail_bytes=lots", "attempt=x"])
async def test_bad_parameters_are_400_problems(client: httpx.AsyncClient, query: str) -> None:
    response = await client.get(f"/v1/tasks/ent/job/0/logs?{query}")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == 400
    assert body["title"] == "Bad Request"


async def test_healthz(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.json() == {"status": "ok"}
