"""With its etcd store gone, the frontend answers 503 problems within its store wait, not after
the store's own 10 s deadline, and serves again once the store is back."""

from __future__ import annotations

import asyncio
import time

from tests.integration.frontend.conftest import ADMIN, job_spec, seed_region, serving
from tests.integration.frontend.problems import assert_problem
from tether.frontend.settings import FrontendSettings
from tether.store import open_store
from tether.store.etcd_server import EtcdServer

STORE_WAIT_S = 1.0


async def test_requests_get_a_quick_503_while_the_store_is_down(etcd_server: EtcdServer) -> None:
    async with open_store(etcd_server.url) as store:
        await seed_region(store)
    settings = FrontendSettings(host="127.0.0.1", port=0, store_wait_s=STORE_WAIT_S)
    async with serving(etcd_server.url, settings) as api:
        assert (await api.get("/v1/jobs", headers=ADMIN)).status_code == 200
        etcd_server.kill()
        for method, path, body in (
            ("GET", "/v1/jobs", None),
            ("POST", "/v1/jobs", job_spec()),
            ("GET", "/v1/machines", None),
        ):
            started = time.monotonic()
            response = await api.request(method, path, json=body, headers=ADMIN)
            took = time.monotonic() - started
            assert_problem(response, 503, "store cannot be reached")
            assert response.headers["retry-after"] == "1"
            # Each store request waits at most STORE_WAIT_S; an answer makes a few at most.
            assert took < 3 * STORE_WAIT_S, f"{method} {path} took {took:.1f} s"
        await asyncio.to_thread(etcd_server.start)
        # The store's client reconnects within its backoff (at most 2 s): until then the answer
        # is still 503, which a client retries after its Retry-After, with the same key.
        headers = ADMIN | {"Idempotency-Key": "after-the-outage"}
        deadline = time.monotonic() + 10
        created = await api.post("/v1/jobs", json=job_spec(), headers=headers)
        while created.status_code == 503 and time.monotonic() < deadline:
            await asyncio.sleep(float(created.headers["retry-after"]))
            created = await api.post("/v1/jobs", json=job_spec(), headers=headers)
        assert created.status_code == 201, created.text
