"""GET /metrics: any principal scrapes the frontend's metrics, which follow its requests."""

from __future__ import annotations

import httpx

from tests.integration.frontend.conftest import ALICE, Region, job_spec
from tests.support.metrics import Scrape, scrape


def backend(region: Region) -> str:
    return "etcd" if region.store.url.startswith("etcd") else "sqlite"


async def scrape_as_alice(api: httpx.AsyncClient) -> Scrape:
    return await scrape(str(api.base_url.join("/metrics")), ALICE)


async def test_metrics_need_a_token_of_any_principal(region: Region) -> None:
    response = await region.api.get("/metrics")
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    unknown = await region.api.get("/metrics", headers={"Authorization": "Bearer nobody"})
    assert unknown.status_code == 401
    # alice has no role at all; the process's own metrics come along with Tether's.
    names = {name for name, _, _ in (await scrape_as_alice(region.api)).samples}
    assert {"tether_frontend_requests_total", "process_cpu_seconds_total"} <= names


async def test_a_submission_moves_the_request_and_store_metrics(region: Region) -> None:
    submit = {"method": "POST", "route": "/v1/jobs"}
    txn = {"backend": backend(region), "operation": "txn"}
    before = await scrape_as_alice(region.api)

    response = await region.api.post("/v1/jobs", json=job_spec(), headers=ALICE)
    assert response.status_code == 201, response.text
    missing = await region.api.get("/v1/jobs/team-a/nothing", headers=ALICE)
    assert missing.status_code == 404

    after = await scrape_as_alice(region.api)
    assert after.value("tether_frontend_requests_total", status="201", **submit) == (
        before.value("tether_frontend_requests_total", status="201", **submit) + 1
    )
    route = "/v1/jobs/{ent}/{job}"
    assert after.value("tether_frontend_requests_total", route=route, status="404") == (
        before.value("tether_frontend_requests_total", route=route, status="404") + 1
    )
    assert after.value("tether_frontend_request_duration_seconds_count", **submit) == (
        before.value("tether_frontend_request_duration_seconds_count", **submit) + 1
    )
    # The submission wrote its job in a transaction.
    assert after.value("tether_store_request_duration_seconds_count", **txn) > before.value(
        "tether_store_request_duration_seconds_count", **txn
    )
    # The scrape before this one is counted too, under its own route.
    assert after.value("tether_frontend_requests_total", route="/metrics", status="200") >= 1
