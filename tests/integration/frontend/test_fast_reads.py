"""The most frequent GETs (a job, its tasks) take a shorter way through the frontend: the same
answers, headers and metrics as the usual way, which still answers every other request and
every error."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.integration.frontend.conftest import ADMIN, ALICE, MALLORY, Region, job_spec
from tests.support.metrics import scrape

FAST = "tether_frontend_fast_reads_total"
JOB = "/v1/jobs/{ent}/{job}"
TASKS = "/v1/jobs/{ent}/{job}/tasks"


@pytest.fixture
async def plain(region: Region) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the region's frontend that sends requests as given (no `min_revision`),
    once a job team-a/web is there and the frontend's cache holds it."""
    response = await region.api.post("/v1/jobs", json=job_spec(), headers=ALICE)
    assert response.status_code == 201, response.text
    await region.cache_caught_up()
    async with httpx.AsyncClient(base_url=region.api.base_url, timeout=10) as client:
        yield client


async def fast_reads(client: httpx.AsyncClient, route: str) -> float:
    metrics = await scrape(str(client.base_url.join("/metrics")), ADMIN)
    return metrics.value(FAST, route=route)


@pytest.mark.parametrize(
    ("path", "route"), [("/v1/jobs/team-a/web", JOB), ("/v1/jobs/team-a/web/tasks", TASKS)]
)
async def test_a_plain_get_goes_the_short_way_with_the_usual_answer(
    plain: httpx.AsyncClient, path: str, route: str
) -> None:
    before = await fast_reads(plain, route)
    short = await plain.get(path, headers=ALICE)
    revision = short.headers["x-tether-revision"]
    # Any other query goes the usual way; at the same revision it answers the same.
    usual = await plain.get(path, params={"consistent": "false"}, headers=ALICE)
    with_revision = await plain.get(path, params={"min_revision": revision}, headers=ALICE)

    assert await fast_reads(plain, route) == before + 2
    assert short.status_code == usual.status_code == with_revision.status_code == 200
    assert short.json() == usual.json() == with_revision.json()
    assert short.headers["content-type"] == usual.headers["content-type"]
    assert short.headers["etag"] == usual.headers["etag"]
    assert revision == usual.headers["x-tether-revision"]
    unchanged = await plain.get(path, headers={**ALICE, "If-None-Match": short.headers["etag"]})
    assert unchanged.status_code == 304
    metrics = await scrape(str(plain.base_url.join("/metrics")), ADMIN)
    assert metrics.value("tether_frontend_requests_total", route=route, status="304") >= 1


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        ("/v1/jobs/team-a/nothing", ALICE, 404),
        ("/v1/jobs/team-a/web", MALLORY, 403),
        ("/v1/jobs/team-a/web", {}, 401),
        ("/v1/jobs/team-a/web", {"Authorization": "Bearer nobody"}, 401),
        ("/v1/jobs/team-a/Not_A_Name/tasks", ALICE, 422),
        ("/v1/jobs/team-a/web/tasks?min_revision=0", ALICE, 422),
        ("/v1/jobs/team-a/web?min_revision=999999999", ALICE, 422),
    ],
)
async def test_errors_are_answered_the_usual_way(
    plain: httpx.AsyncClient, path: str, headers: dict[str, str], status: int
) -> None:
    route = TASKS if path.split("?")[0].endswith("/tasks") else JOB
    before = await fast_reads(plain, route)

    response = await plain.get(path, headers=headers)

    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert await fast_reads(plain, route) == before
