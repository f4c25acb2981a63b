"""`tether profile ls|show|create|rm` against a fake REST API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import problem
from tests.unit.cli.conftest import FakeAPI, run, table_rows

WEB: dict[str, Any] = {
    "name": "web",
    "description": "front ends",
    "settings": {"hugepages": "2048", "governor": "performance"},
    "switch_seconds": 2.5,
}
BATCH: dict[str, Any] = {"name": "batch", "description": "", "settings": {}, "switch_seconds": 0}


def echo(request: httpx.Request) -> httpx.Response:
    """The frontend's answer to a creation: the profile, its defaults filled in."""
    return httpx.Response(
        201,
        json={"description": "", "settings": {}, "switch_seconds": 0} | json.loads(request.content),
    )


def sent(api: FakeAPI) -> list[dict[str, Any]]:
    return [json.loads(request.content) for request in api.paths("POST", "/v1/host-profiles")]


def test_ls_lists_each_profile_with_its_setting_names(api: FakeAPI) -> None:
    profiles = {"host_profiles": [BATCH, WEB]}
    api.on("GET", "/v1/host-profiles", httpx.Response(200, json=profiles))
    result = run("profile", "ls")
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout) == [
        ["name", "switch s", "settings", "description"],
        ["batch", "0", "-", ""],
        ["web", "2.5", "governor, hugepages", "front ends"],
    ]
    api.on("GET", "/v1/host-profiles", httpx.Response(200, json={"host_profiles": []}))
    assert run("profile", "ls").stdout == "no host profiles\n"


def test_show_prints_the_fields_and_every_setting(api: FakeAPI) -> None:
    api.on("GET", "/v1/host-profiles/web", httpx.Response(200, json=WEB))
    result = run("profile", "show", "web")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split() for line in lines[:3]] == [
        ["name", "web"],
        ["description", "front", "ends"],
        ["switch", "2.5", "s"],
    ]
    assert table_rows(result.stdout) == [
        ["setting", "value"],
        ["governor", "performance"],
        ["hugepages", "2048"],
    ]


def test_create_from_options(api: FakeAPI) -> None:
    api.on("POST", "/v1/host-profiles", echo)
    result = run(
        "profile",
        "create",
        "web",
        "--description",
        "front ends",
        "--setting",
        "hugepages=2048",
        "--setting",
        "cmdline=a=b",
        "--setting",
        "empty=",
        "--switch-seconds",
        "2.5",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("host profile web created\n")
    assert sent(api) == [
        {
            "name": "web",
            "description": "front ends",
            "settings": {"hugepages": "2048", "cmdline": "a=b", "empty": ""},
            "switch_seconds": 2.5,
        }
    ]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_create_from_a_file_that_options_override(
    api: FakeAPI, tmp_path: Path, suffix: str
) -> None:
    file = tmp_path / f"web{suffix}"
    fields = {"name": "web", "settings": {"hugepages": "1024", "governor": "performance"}}
    file.write_text(
        json.dumps(fields)
        if suffix == ".json"
        else "name: web\nsettings:\n  hugepages: '1024'\n  governor: performance\n"
    )
    api.on("POST", "/v1/host-profiles", echo)
    result = run("profile", "create", "-f", str(file), "--setting", "hugepages=2048")
    assert result.exit_code == 0, result.output
    assert sent(api) == [
        {"name": "web", "settings": {"hugepages": "2048", "governor": "performance"}}
    ]
    # The name may be given too, when it is the file's.
    assert run("profile", "create", "web", "-f", str(file)).exit_code == 0
    assert sent(api)[1] == fields


def test_create_refuses_a_missing_or_contradictory_name_before_any_request(
    api: FakeAPI, tmp_path: Path
) -> None:
    nameless = run("profile", "create", "--setting", "a=b")
    assert nameless.exit_code == 1
    assert nameless.stderr == (
        "error: name the profile: tether profile create NAME, or a --file with a name\n"
    )
    file = tmp_path / "web.yaml"
    file.write_text("name: web\n")
    other = run("profile", "create", "batch", "-f", str(file))
    assert other.exit_code == 1
    assert other.stderr == f"error: {file} names the profile 'web', the command 'batch'\n"
    file.write_text("name: web\nsettings: [hugepages]\n")
    listed = run("profile", "create", "-f", str(file), "--setting", "a=b")
    assert listed.exit_code == 1
    assert listed.stderr == f"error: {file}: settings must be a mapping of KEY: VALUE\n"
    bad_setting = run("profile", "create", "web", "--setting", "hugepages")
    assert bad_setting.exit_code == 2
    assert "'hugepages' is not KEY=VALUE" in bad_setting.stderr
    assert api.requests == []


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("web.yaml", "- name: web\n", "must hold one profile: a mapping of its fields"),
        ("web.yaml", "name: [web\n", "cannot read a profile from"),
        ("web.yaml", "name: web\nsince: 2025-01-02\n", "is not JSON serializable"),
        ("web.json", "{name: web}", "cannot read a profile from"),
        ("web.txt", "name: web\n", "cannot tell the format of"),
    ],
)
def test_create_refuses_a_file_it_cannot_send(
    api: FakeAPI, tmp_path: Path, name: str, text: str, message: str
) -> None:
    file = tmp_path / name
    file.write_text(text)
    result = run("profile", "create", "-f", str(file))
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert api.requests == []


def test_a_refused_profile_shows_the_fields_the_frontend_names(api: FakeAPI) -> None:
    errors = [{"loc": ["switch_seconds"], "msg": "Input should be greater than or equal to 0"}]
    refused = problem(422, "Validation failed", "invalid request", errors=errors)
    api.on("POST", "/v1/host-profiles", refused)
    result = run("profile", "create", "web", "--switch-seconds", "-1")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: 422 Validation failed: invalid request",
        "  switch_seconds: Input should be greater than or equal to 0",
    ]


def test_rm_deletes_or_says_who_uses_the_profile(api: FakeAPI) -> None:
    in_use = "host profile 'web' is in use: entitlement(s) ads name it"
    api.on(
        "DELETE",
        "/v1/host-profiles/web",
        problem(409, "Conflict", in_use),
        httpx.Response(200, json=WEB),
    )
    refused = run("profile", "rm", "web")
    assert refused.exit_code == 1
    assert refused.stderr == f"error: 409 Conflict: {in_use}\n"
    deleted = run("profile", "rm", "web")
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout == "host profile web deleted\n"
