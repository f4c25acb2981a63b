"""The frontend's request metrics: labelled by route template, not path, and by status."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY

from tether.frontend.api.metrics import UNMATCHED, RequestMetrics


def app() -> FastAPI:
    api = FastAPI()
    api.add_middleware(RequestMetrics)

    @api.get("/things/{name}")
    async def thing(name: str) -> dict[str, str]:
        return {"name": name}

    @api.get("/broken")
    async def broken() -> None:
        raise RuntimeError("a bug")

    return api


def answered(method: str, route: str, status: int) -> float:
    labels = {"method": method, "route": route, "status": str(status)}
    return REGISTRY.get_sample_value("tether_frontend_requests_total", labels) or 0.0


def timed(method: str, route: str) -> float:
    labels = {"method": method, "route": route}
    value = REGISTRY.get_sample_value("tether_frontend_request_duration_seconds_count", labels)
    return value or 0.0


async def test_requests_count_by_route_template_method_and_status() -> None:
    before = answered("GET", "/things/{name}", 200), timed("GET", "/things/{name}")
    unmatched = answered("GET", UNMATCHED, 404)
    not_allowed = answered("POST", "/things/{name}", 405)
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for name in ("a", "b", "c"):
            assert (await client.get(f"/things/{name}")).status_code == 200
        assert (await client.get("/nothing/here")).status_code == 404
        assert (await client.post("/things/a")).status_code == 405
    assert (answered("GET", "/things/{name}", 200), timed("GET", "/things/{name}")) == (
        before[0] + 3,
        before[1] + 3,
    )
    assert answered("GET", UNMATCHED, 404) == unmatched + 1
    assert answered("POST", "/things/{name}", 405) == not_allowed + 1


async def test_an_exception_escaping_the_app_counts_as_500() -> None:
    before = answered("GET", "/broken", 500)
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        with pytest.raises(RuntimeError, match="a bug"):
            await client.get("/broken")
    assert answered("GET", "/broken", 500) == before + 1


async def test_unknown_methods_share_one_label() -> None:
    before = answered("other", UNMATCHED, 404)
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        await client.request("BREW", "/coffee")
    assert answered("other", UNMATCHED, 404) == before + 1
