"""A property-based pass over the REST API: schemathesis against the OpenAPI the frontend serves.

Every operation gets the schema's examples and `TETHER_API_PASS_EXAMPLES` fuzzed requests
(default 10), valid and invalid, as a member of an entitlement and as the admin; as the admin,
also schemathesis' coverage cases (boundaries, missing and wrongly typed fields, bad enums). Each
answer must be no 5xx, a status and content type the schema documents for the operation, and a
body that matches the documented schema; a request the schema forbids must be refused with a
4xx. Generation is derandomized, so CI repeats the same requests; `TETHER_API_PASS_SEED` picks
other ones.

Not checked: that every request the schema allows is accepted (schemathesis'
`positive_data_acceptance`). A few rules cannot be written in JSON Schema (an entitlement is not
its own parent, a maintenance window does not start in the past), and their 422 is right.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis import Case, HookContext
from schemathesis.checks import not_a_server_error
from schemathesis.schemas import BaseSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.frontend.conftest import ADMIN, ALICE, SHARDS, lead, seed_region
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.frontend.app import openapi_document
from tether.frontend.service import Frontend
from tether.frontend.settings import FrontendSettings
from tether.store import open_store

EXAMPLES = int(os.environ.get("TETHER_API_PASS_EXAMPLES", "10"))
SEED = int(os.environ.get("TETHER_API_PASS_SEED", "17"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

DOCUMENT = openapi_document()

# Under pytest-xdist with two workers schemathesis generated about 10 requests instead of 2,000,
# and the tests passed: the pass runs in scripts/test's own pytest process, after the rest.
pytestmark = pytest.mark.in_one_process


def schema_as(headers: dict[str, str], *, coverage: bool) -> BaseSchema:
    """The frontend's OpenAPI, its requests sent with the token in `headers` (schemathesis'
    own auth, so that its cases without a token or with a wrong one stay as they are), with
    schemathesis' coverage cases or without."""
    token = headers["Authorization"].removeprefix("Bearer ")
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "generation": {
                "mode": "all",
                "max-examples": EXAMPLES,
                "deterministic": True,
                # No .hypothesis/ directory: a saved failure would be replayed first, and CI
                # starts from nothing anyway.
                "database": "none",
            },
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": coverage},
            },
            "auth": {"openapi": {"bearer": {"bearer": token}}},
        }
    )
    schema = schemathesis.openapi.from_dict(DOCUMENT, config=config)
    schema.hook("filter_body")(_within_json_schema)
    return schema


def _within_json_schema(context: HookContext, body: Any) -> bool:
    """Leaves out bodies that break the two rules JSON Schema cannot state (both in the schema's
    descriptions): an entitlement is not its own parent, a restart backoff's maximum is not
    below its start."""
    if not isinstance(body, dict):
        return True
    if "parent" in body and body.get("parent") == body.get("name"):
        return False
    restart = body.get("task", {}).get("restart") if isinstance(body.get("task"), dict) else None
    if isinstance(restart, dict):
        initial, most = restart.get("backoff_initial_s", 1.0), restart.get("backoff_max_s", 60.0)
        if isinstance(initial, int | float) and isinstance(most, int | float):
            return bool(most >= initial)
    return True


AS_MEMBER = schema_as(ALICE, coverage=False)
"""Alice, a member of team-a: what she may and may not do. The coverage cases (the validation
of every field, which does not depend on who asks) are the admin's, who may call everything."""
AS_ADMIN = schema_as(ADMIN, coverage=True)


@contextmanager
def frontend_thread(store_url: str) -> Iterator[str]:
    """A frontend on a seeded store, served by its own thread and event loop (schemathesis sends
    its requests synchronously, so they cannot share the test's loop); yields its base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="frontend", daemon=True)
    thread.start()

    async def start() -> tuple[Frontend, Allocator]:
        async with open_store(store_url) as store:
            await seed_region(store)
            await lead(store, *SHARDS)
        # An allocator replica answers placement explanations (without one they are 503).
        replica = Allocator(open_store(store_url), AllocatorSettings(id="allocator-1", port=0))
        await replica.start()
        frontend = Frontend(open_store(store_url), FrontendSettings(host="127.0.0.1", port=0))
        await frontend.start()
        return frontend, replica

    async def stop(frontend: Frontend, replica: Allocator) -> None:
        await frontend.stop()
        await replica.stop()

    try:
        frontend, replica = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
        try:
            yield frontend.url
        finally:
            asyncio.run_coroutine_threadsafe(stop(frontend, replica), loop).result(timeout=30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


@pytest.fixture(scope="module")
def frontend_url() -> Iterator[str]:
    # SQLite only: the pass tests the API's validation and schema, which do not depend on the
    # backend (the store's conformance suite holds the two backends to one behaviour).
    # On tmpfs when there is one: the pass writes thousands of times, each a disk sync.
    shm = Path("/dev/shm")
    with (
        tempfile.TemporaryDirectory(
            prefix="tether-api-pass-", dir=shm if shm.is_dir() else None
        ) as directory,
        frontend_thread(f"sqlite:///{directory}/region.db") as url,
    ):
        yield url


def test_the_frontend_serves_the_schema_under_test(frontend_url: str) -> None:
    served = httpx.get(f"{frontend_url}/openapi.json")
    assert served.json() == json.loads(json.dumps(DOCUMENT))


@AS_MEMBER.parametrize()
def test_api_as_a_member(case: Case[Any], frontend_url: str) -> None:
    case.call_and_validate(base_url=frontend_url, checks=CHECKS)


@AS_ADMIN.parametrize()
def test_api_as_the_admin(case: Case[Any], frontend_url: str) -> None:
    case.call_and_validate(base_url=frontend_url, checks=CHECKS)
