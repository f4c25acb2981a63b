"""`tether allocator` turns its options into settings and runs the replica on the store."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import typer
from typer.testing import CliRunner

from tether.allocator.service import Allocator
from tether.cli import allocator as allocator_cli
from tether.service import Service
from tether.store import Store

# The command alone: `tether.cli.main` wires every service, and the race test runs it for real.
app = typer.Typer()
app.command("allocator")(allocator_cli.allocator)
app.command("other")(lambda: None)  # two commands keep "allocator" a subcommand


def test_options_become_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    served: list[tuple[Service, str | None, str, int]] = []

    def serve(
        make_service: Callable[[Store], Service], url: str | None, log_level: str, metrics: int
    ) -> None:
        served.append((make_service(object()), url, log_level, metrics))  # type: ignore[arg-type]

    monkeypatch.setattr(allocator_cli, "serve", serve)
    options = ["--id", "allocator-9", "--host", "0.0.0.0", "--port", "7070"]
    options += ["--store", "sqlite:///x.db", "--log-level", "DEBUG", "--metrics-port", "9100"]
    result = CliRunner().invoke(app, ["allocator", *options])
    assert result.exit_code == 0, result.output
    [(service, url, log_level, metrics_port)] = served
    assert metrics_port == 9100
    assert isinstance(service, Allocator)
    assert (service.settings.id, service.settings.host, service.settings.port) == (
        "allocator-9",
        "0.0.0.0",
        7070,
    )
    assert (url, log_level) == ("sqlite:///x.db", "DEBUG")


def test_invalid_options_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator_cli, "serve", lambda *_: pytest.fail("must not serve"))
    result = CliRunner().invoke(app, ["allocator", "--port", "70000"])
    assert result.exit_code == 2
    assert "--port" in result.output
    result = CliRunner().invoke(app, ["allocator", "--id", "Not_A_Name"])
    assert result.exit_code == 2
    assert "--id" in result.output
