"""The verbs' shared behaviour: where the client points, and how errors are shown."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer

from tests.support.api import problem
from tests.support.region import write_region_file
from tests.unit.cli.conftest import FakeAPI, run
from tether.cli.main import app, main


def test_settings_come_from_the_local_region_file(api: FakeAPI, tmp_path: Path) -> None:
    token_file = tmp_path / "secrets" / "admin.token"
    token_file.parent.mkdir()
    token_file.write_text("region-admin\n")
    write_region_file(
        tmp_path / ".tether", url="http://127.0.0.1:18080", admin_token_file=str(token_file)
    )
    api.on("GET", "/v1/jobs", httpx.Response(200, json={"jobs": []}))
    result = run("job", "ls", env={"TETHER_URL": None, "TETHER_TOKEN": None})
    assert result.exit_code == 0, result.output
    [request] = api.requests
    assert str(request.url) == "http://127.0.0.1:18080/v1/jobs"
    assert request.headers["Authorization"] == "Bearer region-admin"


def test_options_beat_the_environment(api: FakeAPI) -> None:
    api.on("GET", "/v1/jobs", httpx.Response(200, json={"jobs": []}))
    result = run("job", "ls", "--url", "http://flag.test:1234", "--token", "flag-token")
    assert result.exit_code == 0, result.output
    [request] = api.requests
    assert request.url.host == "flag.test"
    assert request.headers["Authorization"] == "Bearer flag-token"


def test_a_problem_is_one_red_line_plus_field_errors(api: FakeAPI, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: web\n")
    errors = [{"loc": ["body", "count"], "msg": "field required"}]
    api.on(
        "POST", "/v1/jobs", problem(422, "Invalid job spec", "1 validation error", errors=errors)
    )
    result = run("job", "submit", str(spec))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: 422 Invalid job spec: 1 validation error",
        "  body.count: field required",
    ]
    assert "Traceback" not in result.output


def test_an_unreachable_frontend_names_the_url(
    monkeypatch: pytest.MonkeyPatch, api: FakeAPI
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("Connection refused")

    api.on("GET", "/v1/machines", refuse)
    result = run("machine", "ls", "--url", "http://down.test:8080")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("error: cannot reach the Tether frontend at http://down.test:8080")
    assert "scripts/up" in line
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("job", "show", "no-slash"),
        ("job", "scale", "Team/Web", "3"),
        ("job", "rm", "a/b/c"),
        ("task", "logs", "team-a/web"),
        ("task", "logs", "team-a/web/-1"),
        ("task", "logs", "bad_ent/web/0"),
    ],
)
def test_malformed_handles_are_refused_before_any_request(
    api: FakeAPI, args: tuple[str, ...]
) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert "invalid" in result.stderr
    assert api.requests == []


def test_every_verb_has_url_and_token_options() -> None:
    for verb in (
        ("job", "submit"),
        ("job", "ls"),
        ("job", "show"),
        ("job", "scale"),
        ("job", "rm"),
        ("task", "logs"),
        ("machine", "ls"),
        ("status",),
    ):
        result = run(*verb, "--help")
        assert result.exit_code == 0, verb
        for text in ("--url", "--token", "--region-dir", "TETHER_URL", "TETHER_TOKEN"):
            assert text in result.stdout, verb


def test_every_command_that_takes_a_url_takes_a_region_dir() -> None:
    def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
        for name, sub in getattr(command, "commands", {}).items():
            yield from commands(sub, (*path, name))
        options = {opt: param for param in command.params for opt in param.opts}
        if "--url" in options:
            assert "--region-dir" in options, path
            assert options["--region-dir"].envvar == "TETHER_REGION_DIR", path
            yield path

    assert len(list(commands(typer.main.get_command(app)))) >= 30


def test_region_dir_names_the_url_and_token(api: FakeAPI, tmp_path: Path) -> None:
    region_dir = tmp_path / "regions" / "east"
    token_file = region_dir / "admin.token"
    write_region_file(region_dir, url="http://east.test:9", admin_token_file=str(token_file))
    token_file.write_text("east-admin\n")
    api.on("GET", "/v1/jobs", httpx.Response(200, json={"jobs": []}))
    unset: dict[str, str | None] = {"TETHER_URL": None, "TETHER_TOKEN": None}
    by_flag = run("job", "ls", "--region-dir", str(region_dir), env=unset)
    by_env = run("job", "ls", env={**unset, "TETHER_REGION_DIR": str(region_dir)})
    for result in (by_flag, by_env):
        assert result.exit_code == 0, result.output
    for request in api.requests:
        assert str(request.url) == "http://east.test:9/v1/jobs"
        assert request.headers["Authorization"] == "Bearer east-admin"
    assert len(api.requests) == 2


def test_a_region_dir_without_a_region_is_an_error(api: FakeAPI, tmp_path: Path) -> None:
    result = run("job", "ls", "--region-dir", str(tmp_path), env={"TETHER_URL": None})
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error: no region runs from {tmp_path}: it has no region.json (start one with "
        "`tether up --dir DIR`, or pass --url)"
    ]
    assert api.requests == []


def test_an_unknown_token_gets_a_hint(api: FakeAPI) -> None:
    api.on("GET", "/v1/region", problem(401, "Authentication required", "unknown token"))
    result = run("status")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == "error: 401 Authentication required: unknown token"
    assert "hint: pass --token or set TETHER_TOKEN" in result.stderr


def test_invalid_client_settings_are_reported(api: FakeAPI) -> None:
    result = run("job", "ls", env={"TETHER_CLIENT_TIMEOUT_S": "soon"})
    assert result.exit_code == 1
    assert result.stderr.startswith("error: invalid client settings:")
    assert "timeout_s" in result.stderr
    assert api.requests == []


def test_an_unforeseen_failure_is_one_line_unless_debugging(
    api: FakeAPI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def explode(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("boom")

    api.on("GET", "/v1/jobs", explode)
    monkeypatch.setattr(sys, "argv", ["tether", "job", "ls"])
    monkeypatch.setenv("TETHER_URL", "http://tether.test")
    monkeypatch.delenv("TETHER_DEBUG", raising=False)
    with pytest.raises(SystemExit) as ended:
        main()
    assert ended.value.code == 1
    assert capsys.readouterr().err == "error: RuntimeError: boom (TETHER_DEBUG=1 shows where)\n"
    monkeypatch.setenv("TETHER_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main()
