"""`tether broker` turns --dc into settings, and refuses an invalid one with exit status 2."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from tests.support.cli import Served
from tether.broker.service import Broker
from tether.cli import broker as broker_cli

app = typer.Typer()
app.command("broker")(broker_cli.broker)
app.command("other")(lambda: None)  # two commands keep "broker" a subcommand


def test_options_become_settings(served: list[Served]) -> None:
    options = ["--dc", "dc7", "--store", "sqlite:///x.db", "--log-level", "DEBUG"]
    result = CliRunner().invoke(app, ["broker", *options])
    assert result.exit_code == 0, result.output
    [(service, url, log_level)] = served
    assert isinstance(service, Broker)
    assert service.name == "broker dc7"
    assert (url, log_level) == ("sqlite:///x.db", "DEBUG")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--dc", "Not_A_DC"], "--dc: must be 1-63 characters"),
        ([], "--dc is required"),
    ],
)
def test_an_invalid_dc_exits_2_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, served: list[Served], options: list[str], message: str
) -> None:
    monkeypatch.delenv("TETHER_BROKER_DC", raising=False)
    result = CliRunner().invoke(app, ["broker", *options])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert not served
