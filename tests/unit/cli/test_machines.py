"""`tether machine drain|decommission|undrain` against a fake REST API."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.api import problem
from tests.unit.cli.conftest import FakeAPI, run


def notice(kind: str, machine: str = "m1") -> dict[str, Any]:
    return {
        "id": f"{kind}-{machine}",
        "machines": [machine],
        "start": "2026-11-22T10:05:00Z",
        "end": "2027-11-23T10:05:00Z",
        "duration_s": 31622400,
        "kind": kind,
        "reason": "",
        "phase": "scheduled",
        "tasks": [],
    }


def drained(kind: str, created: bool) -> httpx.Response:
    body = {"machine": "m1", "created": created, "notice": notice(kind)}
    return httpx.Response(201 if created else 200, json=body)


def test_drain_sends_the_deadline_and_reason_and_says_what_happened(api: FakeAPI) -> None:
    api.on("POST", "/admin/machines/m1/drain", drained("drain", True), drained("drain", False))
    first = run("machine", "drain", "m1", "--deadline", "0", "--reason", "bad disk")
    assert first.exit_code == 0, first.output
    assert first.stdout == (
        "machine m1: draining (now); tasks moved off it by 2026-11-22 10:05:00 UTC; "
        "notice drain-m1\n"
    )
    again = run("machine", "drain", "m1", "--deadline", "10m")
    assert again.exit_code == 0, again.output
    assert "draining (already, nothing changed)" in again.stdout
    bodies = [json.loads(r.content) for r in api.paths("POST", "/admin/machines/m1/drain")]
    assert bodies == [{"reason": "bad disk", "deadline_s": 0}, {"reason": "", "deadline_s": 600}]


def test_decommission_without_a_deadline_leaves_it_to_the_region(api: FakeAPI) -> None:
    api.on("POST", "/admin/machines/m1/decommission", drained("decommission", True))
    result = run("machine", "decommission", "m1")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("machine m1: decommissioning (now);")
    [request] = api.paths("POST", "/admin/machines/m1/decommission")
    assert json.loads(request.content) == {"reason": ""}


def test_undrain_names_what_it_cancelled(api: FakeAPI) -> None:
    cancelled = {"machine": "m1", "cancelled": [notice("decommission"), notice("drain")]}
    nothing = {"machine": "m1", "cancelled": []}
    api.on(
        "POST",
        "/admin/machines/m1/undrain",
        httpx.Response(200, json=cancelled),
        httpx.Response(200, json=nothing),
    )
    undone = run("machine", "undrain", "m1")
    assert undone.exit_code == 0, undone.output
    assert undone.stdout == ("machine m1: cancelled decommission decommission-m1, drain drain-m1\n")
    again = run("machine", "undrain", "m1")
    assert again.stdout == "machine m1 was not draining or decommissioning: nothing to undo\n"


def test_refusals_and_bad_deadlines_are_errors(api: FakeAPI) -> None:
    api.on(
        "POST",
        "/admin/machines/m9/drain",
        problem(404, "Not found", "machine 'm9' does not exist"),
    )
    missing = run("machine", "drain", "m9")
    assert missing.exit_code == 1
    assert missing.stderr == "error: 404 Not found: machine 'm9' does not exist\n"
    for bad in ("soon", "-5s"):
        refused = run("machine", "drain", "m1", "--deadline", bad)
        assert refused.exit_code == 2, refused.output
        assert "is not a duration" in refused.stderr
    assert api.paths("POST", "/admin/machines/m1/drain") == []
