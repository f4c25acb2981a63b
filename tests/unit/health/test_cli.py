"""`tether health` turns --grace-s into settings, and refuses an invalid one with exit status 2."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from tests.support.cli import Served
from tether.cli import health as health_cli
from tether.health.service import HealthChecker

app = typer.Typer()
app.command("health")(health_cli.health)
app.command("other")(lambda: None)  # two commands keep "health" a subcommand


def test_options_become_settings(served: list[Served]) -> None:
    result = CliRunner().invoke(app, ["health", "--grace-s", "2.5", "--log-level", "DEBUG"])
    assert result.exit_code == 0, result.output
    [(service, url, log_level)] = served
    assert isinstance(service, HealthChecker)
    assert service.settings.grace_s == 2.5
    assert (url, log_level) == (None, "DEBUG")


def test_a_grace_from_the_environment_is_the_default(
    monkeypatch: pytest.MonkeyPatch, served: list[Served]
) -> None:
    monkeypatch.setenv("TETHER_HEALTH_GRACE_S", "7")
    assert CliRunner().invoke(app, ["health"]).exit_code == 0
    [(service, _, _)] = served
    assert isinstance(service, HealthChecker)
    assert service.settings.grace_s == 7.0


@pytest.mark.parametrize("grace", ["0", "-1", "nan"])
def test_an_invalid_grace_exits_2_without_a_traceback(served: list[Served], grace: str) -> None:
    result = CliRunner().invoke(app, ["health", "--grace-s", grace])
    assert result.exit_code == 2
    assert "--grace-s" in result.output
    assert "Traceback" not in result.output
    assert not served
