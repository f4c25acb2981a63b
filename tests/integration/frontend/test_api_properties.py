"""A property-based pass over the REST API: schemathesis, with every check it has, against the
OpenAPI the frontend serves.

Every operation gets the schema's examples and `TETHER_API_PASS_EXAMPLES` fuzzed requests
(default 20), valid and invalid, as a member of an entitlement and as the admin; as the admin,
also schemathesis' coverage cases (boundaries, missing and wrongly typed fields, bad enums,
methods the path does not take, no or a wrong token), and `TETHER_API_PASS_WORKFLOWS`
sequences of calls along the schema's links (default 25). Half of the requests name the
region's entitlements, job and machines, so that they get past a 404. Each answer goes through
every check schemathesis has (`ALL_CHECKS`): no 5xx; a status, content type, headers and body
the schema documents for the operation; a request the schema forbids refused with a 4xx, and
one it allows accepted; an `Allow` naming every method of the path; a token that counts; in a
sequence, nothing deleted that can still be read, nothing created that cannot
(`object_level_authorization` needs identities of one kind to compare, and checks nothing
here). Generation is derandomized, so CI repeats the same requests; `TETHER_API_PASS_SEED`
picks other ones. About 5,000 cases, 2 minutes on two cores.

A schema-valid request that gets a 422 fails `positive_data_acceptance`, unless the rule that
refused it is one JSON Schema cannot state: against other fields, the clock or the store.
Those are `INTENDED`, said in each field's description in the schema and listed in
docs/protocol.md (both checked here), and a 422 passes only when every field it names breaks
one of them.

Under pytest-xdist the pass runs as anywhere else: see `frontend_url` for what once made it
send 10 requests there.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis import Case
from schemathesis.checks import CHECKS, CheckContext, CheckFunction, load_all_checks
from schemathesis.core.transport import Response
from schemathesis.generation.stateful.state_machine import APIStateMachine, RecordingStateMachine
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.schemas import BaseSchema
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.integration.frontend.api_findings import (
    CACHED_READS,
    INTENDED,
    Intended,
    documented_refusal,
)
from tests.integration.frontend.conftest import (
    ADMIN,
    ALICE,
    SHARDS,
    job_spec,
    lead,
    seed_region,
)
from tests.integration.frontend.test_views import machine
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.frontend.app import openapi_document
from tether.frontend.service import Frontend
from tether.frontend.settings import FrontendSettings
from tether.model import to_json
from tether.store import keys, open_store

EXAMPLES = int(os.environ.get("TETHER_API_PASS_EXAMPLES", "20"))
SEED = int(os.environ.get("TETHER_API_PASS_SEED", "17"))
DOCUMENT = openapi_document()
LABELS = {
    f"{method.upper()} {path}" for path, methods in DOCUMENT["paths"].items() for method in methods
}
OPERATIONS = len(LABELS)
MACHINES = ("m1", "m2", "m3")
"""In dc1, which has a broker: drains, decommissions and maintenance reach their notices."""

WORKFLOWS = int(os.environ.get("TETHER_API_PASS_WORKFLOWS", "25"))
"""Sequences of calls along the schema's links the admin makes."""
WORKFLOW_ATTEMPTS = 5

SENT: Counter[tuple[str, str]] = Counter()
"""Requests the pass sent, by who sent them and operation."""


def positive_data_acceptance_unless_intended(
    ctx: CheckContext, response: Response, case: Case[Any]
) -> bool | None:
    """schemathesis' `positive_data_acceptance`, but for a 422 whose every error is one of the
    INTENDED rules of the operation."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if documented_refusal(case.operation.label, response.status_code, response.json()):
            return None
        raise


def _every_check() -> list[CheckFunction]:
    load_all_checks()
    checks: list[CheckFunction] = [
        check
        for check in CHECKS.get_all()
        # A check class runs over a whole run, which only schemathesis' own runner has.
        if not isinstance(check, type) and check is not positive_data_acceptance
    ]
    return [*checks, positive_data_acceptance_unless_intended]


ALL_CHECKS = _every_check()


def test_the_pass_runs_every_check_schemathesis_has() -> None:
    ran = {check.__name__ for check in ALL_CHECKS} - {"positive_data_acceptance_unless_intended"}
    assert ran | {"positive_data_acceptance"} == {check.__name__ for check in CHECKS.get_all()}


def schema_as(headers: dict[str, str], *, coverage: bool) -> BaseSchema:
    """The frontend's OpenAPI, its requests sent with the token in `headers` (schemathesis'
    own auth, so that its cases without a token or with a wrong one stay as they are), with
    schemathesis' coverage cases or without."""
    token = headers["Authorization"].removeprefix("Bearer ")
    region = {"probability": 0.5}
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
            "dictionaries": {
                "entitlements": {"values": ["team-a", "team-b"]},
                "jobs": {"values": ["web"]},
            },
            "parameters": {
                "path.ent": {"dictionary": "entitlements", **region},
                "path.name": {"dictionary": "entitlements", **region},
                "path.job": {"dictionary": "jobs", **region},
                "body.entitlement": {"dictionary": "entitlements", **region},
            },
            # A drain's coverage cases (no body, every field at its bounds) on a real machine:
            # they draw no dictionary, and an unknown machine's 404 would hide how its body is
            # taken. (The integration tests refuse unknown machines.)
            "operations": [
                {"include-path-regex": "^/admin/machines/", "parameters": {"machine_id": "m1"}}
            ],
        }
    )
    return schemathesis.openapi.from_dict(DOCUMENT, config=config)


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
            for machine_id in MACHINES:
                await store.put(keys.machine(machine_id), to_json(machine(machine_id)))
        # An allocator replica answers placement explanations (without one they are 503).
        replica = Allocator(open_store(store_url), AllocatorSettings(id="allocator-1", port=0))
        await replica.start()
        frontend = Frontend(open_store(store_url), FrontendSettings(host="127.0.0.1", port=0))
        await frontend.start()
        async with httpx.AsyncClient(base_url=frontend.url) as client:
            submitted = await client.post("/v1/jobs", headers=ALICE, json=job_spec("web"))
            assert submitted.status_code == 201, submitted.text
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


# The parameter gives every operation's test its own node id. pytest (9.2) builds an item's id
# from its original name and its parameters, and schemathesis (4.32) gives each operation's item
# the test's name: all 48 would share one id, and pytest-xdist, which hands tests to workers by
# id, would run the first alone (GET /healthz): the 10 requests this pass once sent under it.
@pytest.fixture(scope="module", params=["sqlite"])
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


def ending(case: Case[Any]) -> Case[Any]:
    """The case, asking an event stream that would follow for ever to end once it told what
    it keeps (`follow=false`): test_events.py follows streams. A case whose `follow` is invalid
    stays as it is, to be refused."""
    if case.operation.label == "GET /v1/events":
        query = case.query if isinstance(case.query, dict) else {}
        if query.get("follow", True) in (True, "true"):
            case.query = {**query, "follow": "false"}
    return case


@AS_MEMBER.parametrize()
def test_api_as_a_member(case: Case[Any], frontend_url: str) -> None:
    SENT["member", case.operation.label] += 1
    ending(case).call_and_validate(base_url=frontend_url, checks=ALL_CHECKS)


@AS_ADMIN.parametrize()
def test_api_as_the_admin(case: Case[Any], frontend_url: str) -> None:
    SENT["admin", case.operation.label] += 1
    ending(case).call_and_validate(base_url=frontend_url, checks=ALL_CHECKS)


def test_api_workflows_as_the_admin(frontend_url: str) -> None:
    """Calls in sequence, each taking what an earlier answer gave along the schema's links (an
    entitlement created, then read, replaced, deleted and read again): what `use_after_free`
    and `ensure_resource_availability` look at."""
    scenarios = 0

    def setup(self: APIStateMachine) -> None:
        nonlocal scenarios
        scenarios += 1

    def get_call_kwargs(self: APIStateMachine, case: Case[Any]) -> dict[str, Any]:
        return {"base_url": frontend_url}

    def validate_response(
        self: RecordingStateMachine, response: Response, case: Case[Any], **kwargs: Any
    ) -> None:
        SENT["workflows", case.operation.label] += 1
        case.validate_response(
            response, checks=ALL_CHECKS, transport_kwargs=kwargs, recorder=self.recorder
        )

    def before_call(self: APIStateMachine, case: Case[Any]) -> None:
        ending(case)

    methods = {
        "setup": setup,
        "before_call": before_call,
        "get_call_kwargs": get_call_kwargs,
        "validate_response": validate_response,
    }
    machine = type("Workflows", (AS_ADMIN.as_state_machine(),), methods)
    for attempt in range(WORKFLOW_ATTEMPTS):
        if scenarios >= WORKFLOWS:
            break
        workflows = cast(type[APIStateMachine], hypothesis.seed(SEED + attempt)(machine))
        try:
            workflows.run(
                settings=hypothesis.settings(
                    max_examples=WORKFLOWS - scenarios,
                    stateful_step_count=10,
                    phases=[hypothesis.Phase.generate],
                    database=None,
                    deadline=None,
                    suppress_health_check=list(hypothesis.HealthCheck),
                )
            )
        except hypothesis.errors.FlakyStrategyDefinition:
            # A sequence that starts as an earlier one did may meet the region in another state
            # and draw otherwise, which Hypothesis calls flaky: start again, from another seed,
            # as schemathesis' own runner does. (A failure that does not repeat is no such
            # thing: it fails the test.)
            continue
    assert scenarios >= WORKFLOWS


@pytest.mark.parametrize("rule", INTENDED, ids=lambda rule: f"{rule.field}: {rule.message}")
def test_each_intended_finding_is_said_in_the_schema(rule: Intended) -> None:
    """A rule the pass lets refuse valid data is one the schema tells clients of: the
    description of its field (or of an object holding it) says when it answers 422."""
    for label in rule.operations:
        method, path = label.split(" ", 1)
        operation = DOCUMENT["paths"][path][method.lower()]
        if "requestBody" not in operation:  # a query parameter's rule
            (parameter,) = [p for p in operation["parameters"] if p["name"] == rule.field]
            assert "422" in parameter["description"], (label, rule.field)
            continue
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        descriptions = []
        for name in (rule.described or rule.field).split("."):
            schema = _resolved(schema)["properties"][name]
            descriptions.append(schema.get("description", ""))
        assert any("422" in text for text in descriptions), (label, rule.field, descriptions)


@pytest.mark.parametrize("rule", INTENDED, ids=lambda rule: f"{rule.field}: {rule.message}")
def test_each_intended_finding_is_in_the_protocol(rule: Intended) -> None:
    protocol = (Path(__file__).parents[3] / "docs" / "protocol.md").read_text()
    section = protocol.split("### What the schema cannot say\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    field = f"| `{rule.described or rule.field}` |"
    if rule.operations == CACHED_READS:  # one row for every read from the cache
        assert f"| every GET that takes `{rule.field}` {field}" in section, field
        return
    for operation in rule.operations:
        assert any(f"`{operation}`" in row and field in row for row in rows), (operation, field)


def _resolved(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$ref` followed and a nullable field's `anyOf` reduced to its
    object."""
    if "$ref" in schema:
        return _resolved(DOCUMENT["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
    if "anyOf" in schema and "properties" not in schema:
        [member] = [member for member in schema["anyOf"] if member.get("type") != "null"]
        return _resolved(member)
    return schema


def test_each_operation_is_a_test_of_its_own(request: pytest.FixtureRequest) -> None:
    assert len(_this_module(request)) == len({item.nodeid for item in _this_module(request)})


def test_the_pass_sent_thousands_of_requests(request: pytest.FixtureRequest) -> None:
    # What the whole pass sends: run with only part of it, this test fails rather than skips.
    assert len(_this_module(request)) >= 2 * OPERATIONS + 2 * len(INTENDED) + 5, (
        "only part of the pass ran: select the whole module"
    )
    by_role = Counter[str]()
    for (role, _), sent in SENT.items():
        by_role[role] += sent
    # Every operation was called as each role, and about `EXAMPLES` times at least, the admin's
    # coverage cases besides. What this seed sends, with room for schemathesis to change a
    # little: a collapsed pass (10 requests under xdist once) fails here.
    for role in ("member", "admin"):
        assert {operation for who, operation in SENT if who == role} == LABELS, role
    assert by_role["member"] >= OPERATIONS * EXAMPLES * 3 // 4, by_role
    assert by_role["admin"] >= OPERATIONS * (EXAMPLES * 3 // 4 + 40), by_role
    assert by_role["workflows"] >= WORKFLOWS * 5, by_role


def _this_module(request: pytest.FixtureRequest) -> list[pytest.Item]:
    return [item for item in request.session.items if item.path == request.path]
