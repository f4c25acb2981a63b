"""The SDK's views against the OpenAPI document the frontend serves: the same fields, each of the
same type, required on both sides or on neither.

The views are compared with the document's component schemas, not generated from them. A
generator would rewrite views.py into its own names, docstrings and layout, and a test that
regenerates and diffs would say only that the text changed; the comparison keeps the views as
they are written and names the model, the field and what differs on each side, for example
`MachineView.host_profile: the API sends it, the SDK has no such field`.

Each view the client returns is paired with the component of the route it reads (`ROUTES`);
the views nested in it are paired by walking both schemas side by side, so a renamed API
component (the SDK's `ControlView` is the API's `ControlStatus`) needs no table. Types are
compared as JSON types: an enum is the string it is sent as, a datetime is a `date-time`
string, a model is any model whose own fields agree. Constraints (patterns, bounds) are the
frontend's business: the SDK reads answers, it does not validate requests. One looseness is
allowed on purpose: an SDK field typed as any JSON object (`JobView.spec`, the spec as
submitted) matches any object the API sends there, as the SDK does not copy the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import pytest
from pydantic import BaseModel, Field
from pydantic.json_schema import models_json_schema

from tether.frontend.app import openapi_document
from tether.sdk import views
from tether.sdk.views import View

DOCUMENT: Final = openapi_document()
API: Final[dict[str, Any]] = DOCUMENT["components"]["schemas"]
REF: Final = "#/components/schemas/{model}"

ROUTES: Final[tuple[tuple[type[View], str, str, str | None], ...]] = (
    (views.JobView, "get", "/v1/jobs/{ent}/{job}", None),
    (views.OperationView, "get", "/v1/jobs/{ent}/{job}/operations", "operations"),
    (views.TaskView, "get", "/v1/jobs/{ent}/{job}/tasks", "tasks"),
    (views.PlacementView, "get", "/v1/jobs/{ent}/{job}/placement", None),
    (views.MaintenanceView, "get", "/v1/maintenance/{notice_id}", None),
    (views.MachineView, "get", "/v1/machines", "machines"),
    (views.MachineDrainView, "post", "/admin/machines/{machine_id}/drain", None),
    (views.MachineUndrainView, "post", "/admin/machines/{machine_id}/undrain", None),
    (views.RegionView, "get", "/v1/region", None),
    (views.EntitlementUseView, "get", "/v1/queues", "queues"),
    (views.QueueView, "get", "/v1/queues/{ent}", None),
    (views.HostProfileView, "get", "/v1/host-profiles/{name}", None),
    (views.ShardDetailView, "get", "/admin/shards", "shards"),
    (views.ShardMoveView, "post", "/admin/shards/{shard}/move", None),
    (views.ShardDrainView, "post", "/admin/shards/{shard}/drain", None),
    (views.ShardFailoverView, "post", "/admin/shards/{shard}/failover", None),
    (views.PrincipalToken, "post", "/admin/principals", None),
    (views.EphemeralResourceView, "post", "/v1/resources", None),
    (views.ResourceStateView, "get", "/v1/resources", "resources"),
    (views.RebalanceRunView, "post", "/admin/rebalance/runs", None),
    (views.RebalanceRunView, "get", "/admin/rebalance/runs/{run_id}", None),
    (views.RebalanceRunView, "get", "/admin/rebalance/runs", "runs"),
    (views.AcceleratorReportView, "put", "/v1/accelerator-reports/{ent}", None),
)
"""Each view the client returns, with the route it reads it from and, for a list, the key of
the list in the answer."""

STREAMED: Final[tuple[tuple[type[View], str], ...]] = (
    (views.RegionEventView, "RegionEvent"),
    (views.RegionSnapshotView, "RegionSnapshot"),
    (views.EventGapView, "EventGap"),
)
"""Each view of an event stream's messages (`TetherClient.events`), with its API component."""

Type = tuple[Any, ...]
"""A JSON type: `("integer",)`, `("string", "date-time")`, `("array", item)`, `("map", value)`,
`("model", name)`, `("object",)` (any object), `("union", *members)`."""


def component(ref: str) -> str:
    return ref.removeprefix(REF.format(model=""))


def response_component(method: str, path: str, key: str | None) -> str:
    """The component a route answers with (its first success), or of the items of its list
    under `key`."""
    responses = DOCUMENT["paths"][path][method]["responses"]
    success = next(answer for status, answer in responses.items() if status.startswith("2"))
    name = component(success["content"]["application/json"]["schema"]["$ref"])
    if key is None:
        return name
    return component(API[name]["properties"][key]["items"]["$ref"])


def type_of(schema: dict[str, Any], schemas: dict[str, Any]) -> Type:
    """The JSON type a schema describes; refs are looked up in `schemas`."""
    if "$ref" in schema:
        name = component(schema["$ref"])
        target = schemas[name]
        return ("model", name) if "properties" in target else type_of(target, schemas)
    if len(schema.get("allOf", ())) == 1:
        return type_of(schema["allOf"][0], schemas)
    if "anyOf" in schema:
        members = [type_of(member, schemas) for member in schema["anyOf"]]
        # null last, as people write it.
        members.sort(key=lambda member: (member == ("null",), render(member, erased=True)))
        return ("union", *members)
    kind = schema.get("type", "string" if "enum" in schema else None)
    if kind == "array":
        return ("array", type_of(schema.get("items", {}), schemas))
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, dict):
            return ("map", type_of(values, schemas))
        patterns = list(schema.get("patternProperties", {}).values())
        if len(patterns) == 1:
            return ("map", type_of(patterns[0], schemas))
        return ("object",)
    if kind == "string" and "format" in schema:
        return ("string", schema["format"])
    return (kind,)


def render(type_: Type, *, erased: bool = False) -> str:
    """`type_` as people write it; `erased` leaves out model names (for sorting unions)."""
    kind = type_[0]
    if kind == "model":
        return "model" if erased else type_[1]
    if kind == "union":
        return " | ".join(render(member, erased=erased) for member in type_[1:])
    if kind in ("array", "map"):
        return f"{'list' if kind == 'array' else 'map'} of {render(type_[1], erased=erased)}"
    if kind == "object":
        return "any object"
    return type_[-1] if kind == "string" else str(kind)


def match(sdk: Type, api: Type, pairs: list[tuple[str, str]]) -> bool:
    """Whether the SDK's type reads what the API sends; the models met on the way, paired, are
    added to `pairs` to compare next."""
    if sdk == ("object",) and api[0] in ("model", "map", "object"):
        return True
    if sdk[0] != api[0] or len(sdk) != len(api):
        return False
    if sdk[0] == "model":
        pairs.append((sdk[1], api[1]))
        return True
    if sdk[0] in ("array", "map", "union"):
        return all(match(s, a, pairs) for s, a in zip(sdk[1:], api[1:], strict=True))
    return sdk == api


def sdk_schemas(sdk_views: list[type[BaseModel]]) -> dict[str, Any]:
    """Every view's schema, and those of the views nested in them, by name."""
    _, definitions = models_json_schema(
        [(view, "validation") for view in sdk_views], ref_template=REF
    )
    schemas: dict[str, Any] = definitions["$defs"]
    return schemas


def disagreements(
    roots: Sequence[tuple[type[BaseModel], str]],
) -> tuple[list[str], set[str]]:
    """How the SDK's views (each root paired with an API component, and what they nest) differ
    from the API's schemas, one line each; and the names of the views compared."""
    sdk = sdk_schemas([view for view, _ in roots])
    queue = [(view.__name__, name) for view, name in roots]
    compared: set[tuple[str, str]] = set()
    found: list[str] = []
    while queue:
        pair = queue.pop(0)
        if pair in compared:
            continue
        compared.add(pair)
        found.extend(_model_differences(*pair, sdk, queue))
    return found, {sdk_name for sdk_name, _ in compared}


def _model_differences(
    sdk_name: str, api_name: str, sdk: dict[str, Any], queue: list[tuple[str, str]]
) -> Iterator[str]:
    label = sdk_name if sdk_name == api_name else f"{sdk_name} (the API's {api_name})"
    ours, theirs = sdk[sdk_name], API[api_name]
    fields, sent = ours["properties"], theirs["properties"]
    required, required_sent = set(ours.get("required", ())), set(theirs.get("required", ()))
    for field in sorted(sent.keys() - fields.keys()):
        yield f"{label}.{field}: the API sends it, the SDK has no such field"
    for field in sorted(fields.keys() - sent.keys()):
        yield f"{label}.{field}: the SDK reads it, the API has no such field"
    for field in sorted(fields.keys() & sent.keys()):
        ours_type, theirs_type = type_of(fields[field], sdk), type_of(sent[field], API)
        if not match(ours_type, theirs_type, queue):
            yield (
                f"{label}.{field}: the API sends {render(theirs_type)}, "
                f"the SDK reads {render(ours_type)}"
            )
        if (field in required) != (field in required_sent):
            side, other = (
                ("the API", "the SDK") if field in required_sent else ("the SDK", "the API")
            )
            yield f"{label}.{field}: required in {side}, optional in {other}"


def test_every_view_the_client_returns_is_what_its_route_answers() -> None:
    roots = [(view, response_component(method, path, key)) for view, method, path, key in ROUTES]
    roots += STREAMED
    found, compared = disagreements(roots)
    if found:
        pytest.fail(
            "the SDK's views and the API's schema differ:\n" + "\n".join(found), pytrace=False
        )
    every_view = {
        value.__name__
        for value in vars(views).values()
        if isinstance(value, type) and issubclass(value, View) and value is not View
    }
    assert every_view - compared == set(), "views no route of ROUTES reaches"


class _Topology(BaseModel):
    region: str
    dc: str
    msb: str
    rack: int


class _Machine(BaseModel):
    """The API's MachineView with a field missing, two too many, one of another type, one
    optional that the API requires, and a nested model with a field of another type."""

    id: str
    hostname: str
    topology: _Topology
    hardware_type: str
    attributes: dict[str, str]
    state: str
    entitlement: str | None
    host_profile: str | None
    capacity: dict[str, Any]
    allocated: dict[str, Any]
    free: dict[str, Any]
    tasks: str
    heartbeat: bool = False
    uptime: int = 0
    labels: list[str] = Field(default_factory=list)


def test_each_difference_names_the_model_the_field_and_both_sides() -> None:
    found, compared = disagreements([(_Machine, "MachineView")])
    assert sorted(found) == [
        "_Machine (the API's MachineView).heartbeat: required in the API, optional in the SDK",
        "_Machine (the API's MachineView).host_profile_current: the API sends it, the SDK has "
        "no such field",
        "_Machine (the API's MachineView).labels: the SDK reads it, the API has no such field",
        "_Machine (the API's MachineView).tasks: the API sends integer, the SDK reads string",
        "_Machine (the API's MachineView).uptime: the SDK reads it, the API has no such field",
        "_Topology (the API's Topology).rack: the API sends string, the SDK reads integer",
    ]
    assert compared == {"_Machine", "_Topology"}


@pytest.mark.parametrize(
    ("sdk", "api", "agrees"),
    [
        ({"type": "string", "format": "date-time"}, {"type": "string"}, False),
        (
            {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            {"anyOf": [{"type": "null"}, {"type": "integer"}]},
            True,
        ),
        ({"type": "integer"}, {"anyOf": [{"type": "integer"}, {"type": "null"}]}, False),
        ({"type": "string"}, {"$ref": REF.format(model="MachineState")}, True),
        ({"type": "object"}, {"$ref": REF.format(model="JobSpec")}, True),
        ({"type": "string"}, {"$ref": REF.format(model="JobSpec")}, False),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            API["Resources"]["properties"]["extra"],
            True,
        ),
    ],
)
def test_types_compare_as_json_types(
    sdk: dict[str, Any], api: dict[str, Any], agrees: bool
) -> None:
    assert match(type_of(sdk, {}), type_of(api, API), []) is agrees
