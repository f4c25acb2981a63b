"""The OpenAPI document says what the server checks: every schema a route names is in it, every
answer a route gives is documented, and the bounds the models enforce are in the schemas."""

from __future__ import annotations

import json
import re
from typing import Any, Final

import pytest

from tether.config import limit_settings
from tether.frontend.app import openapi_document
from tether.model import MAX_MAINTENANCE_S, MAX_QUANTITY
from tether.model.accelerator import SCALE_FACTOR_PATTERN
from tether.model.placement import NUMBER_PATTERN

DOCUMENT: Final = openapi_document()
SCHEMAS: Final[dict[str, Any]] = DOCUMENT["components"]["schemas"]


def body_schema(method: str, path: str) -> dict[str, Any]:
    """The component a route's JSON body is."""
    body = DOCUMENT["paths"][path][method]["requestBody"]
    ref: str = body["content"]["application/json"]["schema"]["$ref"]
    return dict(SCHEMAS[ref.rsplit("/", 1)[1]])


def test_every_schema_a_route_names_is_in_the_document() -> None:
    named = set(re.findall(r'"#/components/schemas/([^"]+)"', json.dumps(DOCUMENT)))
    assert named - set(SCHEMAS) == set()
    # The body POST /v1/resources reads (once left out: schemathesis then sent no body).
    assert "SetResourceRequest" in named


@pytest.mark.parametrize("verb", ["drain", "decommission"])
def test_a_drain_documents_its_two_successes_and_an_optional_body(verb: str) -> None:
    operation = DOCUMENT["paths"][f"/admin/machines/{{machine_id}}/{verb}"]["post"]
    view = {"$ref": "#/components/schemas/MachineDrainView"}
    for status in ("200", "201"):
        assert operation["responses"][status]["content"]["application/json"]["schema"] == view
    assert operation["requestBody"]["required"] is False


def test_only_drains_and_rebalancer_runs_take_an_optional_body() -> None:
    bodies = {
        path
        for path, methods in DOCUMENT["paths"].items()
        for other in methods.values()
        if "requestBody" in other and not other["requestBody"]["required"]
    }
    assert bodies == {
        "/admin/machines/{machine_id}/drain",
        "/admin/machines/{machine_id}/decommission",
        "/admin/rebalance/runs",
    }


def test_the_bounds_the_models_enforce_are_in_the_schema() -> None:
    spec = SCHEMAS["JobSpec-Input"]["properties"]
    assert (spec["count"]["minimum"], spec["count"]["maximum"]) == (
        1,
        limit_settings().max_tasks_per_job,
    )
    assert (spec["priority"]["minimum"], spec["priority"]["maximum"]) == (0, 1000)
    assert SCHEMAS["Resources"]["properties"]["cpu"]["maximum"] == MAX_QUANTITY
    entitlement = SCHEMAS["Entitlement"]["properties"]
    assert (entitlement["weight"]["minimum"], entitlement["weight"]["maximum"]) == (1, 1000)
    assert SCHEMAS["PreemptionPolicy"]["properties"]["grace_s"]["maximum"] == 3600
    maintenance = body_schema("post", "/v1/maintenance")["properties"]
    assert maintenance["duration_s"]["maximum"] == MAX_MAINTENANCE_S
    deadline = body_schema("post", "/admin/machines/{machine_id}/drain")["properties"]
    assert (deadline["deadline_s"]["minimum"], deadline["deadline_s"]["maximum"]) == (
        0,
        MAX_MAINTENANCE_S,
    )


def test_rules_of_names_and_numbers_are_in_the_schema() -> None:
    env = SCHEMAS["TaskTemplate"]["properties"]["env"]
    assert env["propertyNames"] == {"not": {"pattern": "^TETHER_"}}
    label = body_schema("post", "/v1/resources")["properties"]["label"]
    assert label["not"] == {"enum": ["cpu", "disk", "gpus", "memory"]}
    profile = body_schema("put", "/v1/throughput-profiles/{ent}/{name}")["properties"]
    factors = profile["throughputs"]["additionalProperties"]["additionalProperties"]
    assert factors["propertyNames"] == {"pattern": SCALE_FACTOR_PATTERN}
    assert factors["additionalProperties"] == {"type": "number", "minimum": 0}
    # `>=` and `<=` take a number; the rest of the operands' rules were there before.
    operands = SCHEMAS["Constraint"]["else"]["else"]
    assert operands["if"] == {"properties": {"op": {"enum": [">=", "<="]}}}
    assert operands["then"] == {"properties": {"value": {"pattern": NUMBER_PATTERN}}}
    # A time a person sets stays a date in UTC, a duration later too.
    planned = {"type": "string", "format": "date-time", "pattern": "^[1-8][0-9]{3}-"}
    assert SCHEMAS["JobSpec-Input"]["properties"]["deadline"]["anyOf"][0] == planned
    assert body_schema("post", "/v1/maintenance")["properties"]["start"]["anyOf"][0] == planned
    # A machine, or constraints: not both.
    assert SCHEMAS["NodeSpec"]["then"] == {"properties": {"constraints": {"maxItems": 0}}}


def test_an_update_names_a_field_that_is_not_null() -> None:
    update = body_schema("patch", "/v1/jobs/{ent}/{job}")
    assert update["anyOf"] == [
        {"required": [field], "properties": {field: {"not": {"type": "null"}}}}
        for field in ("version", "suspended", "placement")
    ]
