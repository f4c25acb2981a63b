"""`tether resource set|ls|rm` against a fake REST API."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.api import problem
from tests.unit.cli.conftest import FakeAPI, run, table_rows

NOW = "2026-11-26T12:00:00Z"


def record(label: str, **fields: Any) -> dict[str, Any]:
    return {
        "entitlement": "ml",
        "label": label,
        "grants": [],
        "created_at": NOW,
        "updated_at": NOW,
    } | fields


def test_set_sends_the_node_spec_the_options_say(api: FakeAPI) -> None:
    api.on("POST", "/v1/resources", httpx.Response(200, json=record("gang")))
    on_one = run("resource", "set", "ml", "gang", "2", "--machine", "m-1", "--owner-job", "j")
    assert on_one.exit_code == 0, on_one.output
    assert on_one.stdout == "ml/gang: 2 on m-1\n"
    by_attributes = run(
        "resource", "set", "ml", "gang", "1", "--constraint", "zone==a", "--constraint", "ssd"
    )
    assert by_attributes.exit_code == 0, by_attributes.output
    everywhere = run("resource", "set", "ml", "gang", "1", "--ttl-s", "60")
    assert everywhere.stdout == "ml/gang: 1 on every machine\n"
    bodies = [json.loads(request.content) for request in api.paths("POST", "/v1/resources")]
    assert bodies == [
        {
            "entitlement": "ml",
            "label": "gang",
            "capacity": 2,
            "node_spec": {"machine": "m-1"},
            "owner_job": "j",
        },
        {
            "entitlement": "ml",
            "label": "gang",
            "capacity": 1,
            "node_spec": {
                "constraints": [
                    {"attribute": "zone", "op": "==", "value": "a"},
                    {"attribute": "ssd", "op": "exists", "value": None},
                ]
            },
        },
        {"entitlement": "ml", "label": "gang", "capacity": 1, "node_spec": {}, "ttl_s": 60.0},
    ]


def test_set_refusals_are_errors_without_a_traceback(api: FakeAPI) -> None:
    held = "lowering ephemeral resource 'ml/gang' would leave running tasks holding more"
    api.on("POST", "/v1/resources", problem(409, "Conflict", held))
    refused = run("resource", "set", "ml", "gang", "0", "--machine", "m-1")
    assert refused.exit_code == 1
    assert refused.stderr == f"error: 409 Conflict: {held}\n"
    malformed = run("resource", "set", "ml", "gang", "1", "--constraint", "zone==")
    assert malformed.exit_code == 2
    assert "'zone==' is not ATTRIBUTE==VALUE" in malformed.stderr


def test_ls_sums_each_label_or_lists_its_machines(api: FakeAPI) -> None:
    state = {
        "resources": [
            {
                "resource": record("gang", owner_job="train"),
                "machines": [
                    {"machine": "m-1", "capacity": 2, "held": 2, "free": 0},
                    {"machine": "m-2", "capacity": 2, "held": 1, "free": 1},
                ],
                "machines_truncated": True,
            }
        ]
    }
    api.on("GET", "/v1/resources", httpx.Response(200, json=state))
    summed = run("resource", "ls", "--entitlement", "ml")
    assert summed.exit_code == 0, summed.output
    assert table_rows(summed.stdout)[1] == ["ml/gang", "2+", "4", "3", "1", "with job train"]
    assert api.requests[-1].url.params["entitlement"] == "ml"
    per_machine = run("resource", "ls", "--machines")
    assert table_rows(per_machine.stdout)[1:] == [
        ["ml/gang", "m-1", "2", "2", "0"],
        ["ml/gang", "m-2", "2", "1", "1"],
    ]
    api.on("GET", "/v1/resources", httpx.Response(200, json={"resources": []}))
    assert run("resource", "ls").stdout == "no ephemeral resources\n"


def test_rm_deletes_the_label(api: FakeAPI) -> None:
    api.on("DELETE", "/v1/resources/ml/gang", httpx.Response(200, json=record("gang")))
    deleted = run("resource", "rm", "ml", "gang")
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout == "deleted ml/gang\n"
