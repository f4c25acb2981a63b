"""`tether health` turns --grace-s into settings, and refuses an invalid one with exit status 2."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import typer
from typer.testing import CliRunner

from tether.cli import health as health_cli
from tether.health.service import HealthChecker
from tether.service import Service
from tether.store import Store

app = typer.Typer()
app.command("health")(health_cli.health)
app.command("other")(lambda: None)  # two commands keep "health" a subcommand


def test_options_become_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[tuple[Service, str | None, str]] = []

    def serve(make_service: Callable[[Store], Service], url: str | None, log_level: str) -> None:
        served.append((make_service(object()), url, log_level))  # type: ignore[arg-type]

    monkeypatch.setattr(health_cli, "serve", serve)
    result = CliRunner().invoke(app, ["health", "--grace-s", "2.5", "--log-level", "DEBUG"])
    assert result.exit_code == 0, result.output
    [(service, url, log_level)] = served
    assert isinstance(service, HealthChecker)
    assert service.settings.grace_s == 2.5
    assert (url, log_level) == (None, "DEBUG")


def test_a_grace_from_the_environment_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[Service] = []
    monkeypatch.setenv("TETHER_HEALTH_GRACE_S", "7")
    monkeypatch.setattr(
        health_cli,
        "serve",
        lambda make_service, *_: served.append(make_service(object())),
    )
    assert CliRunner().invoke(app, ["health"]).exit_code == 0
    [service] = served
    assert isinstance(service, HealthChecker)
    assert service.settings.grace_s == 7.0


@pytest.mark.parametrize("grace", ["0", "-1", "nan"])
def test_an_invalid_grace_exits_2_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, grace: str
) -> None:
    monkeypatch.setattr(health_cli, "serve", lambda *_: pytest.fail("must not serve"))
    result = CliRunner().invoke(app, ["health", "--grace-s", grace])
    assert result.exit_code == 2
    assert "--grace-s" in result.output
    assert "Traceback" not in result.output
