"""Service commands run on their own (`python -m tether.cli.services`), as `tether up` starts
them, and are the same commands `tether` itself offers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tether.cli.main import app
from tether.cli.services import SERVICE_COMMANDS, command


@pytest.mark.parametrize("name", sorted(SERVICE_COMMANDS))
def test_tether_offers_each_service_command(name: str) -> None:
    # The first words of the command's summary (help is wrapped to the terminal's width).
    summary = " ".join((command(name).__doc__ or "").split()[:3])
    listed = CliRunner().invoke(app, ["--help"])
    assert any(line.startswith(f"│ {name} ") for line in listed.output.splitlines())
    assert summary in listed.output
    helped = CliRunner().invoke(app, [name, "--help"])
    assert helped.exit_code == 0, helped.output
    assert f" {name} [OPTIONS]" in helped.output
    assert summary in helped.output


def test_other_commands_import_no_service() -> None:
    probe = (
        "import sys; from tether.cli.main import app\n"
        "try:\n    app(['version'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('tether.')))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = ran.stdout.strip().splitlines()[-1]
    for service in ("agent", "allocator", "frontend", "scheduler", "broker", "health"):
        assert f"'tether.{service}.service'" not in loaded
    assert "'tether.cli.appsched'" not in loaded


def test_a_service_runs_without_the_rest_of_the_cli() -> None:
    probe = (
        "import sys; from tether.cli.services import main\n"
        "try:\n    main(['health', '--help'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('tether.cli.')))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Usage: tether health" in ran.stdout
    loaded = ran.stdout.strip().splitlines()[-1]
    for other in ("tether.cli.frontend", "tether.cli.appsched", "tether.cli.jobs"):
        assert f"'{other}'" not in loaded


def test_an_unknown_service_is_refused_with_the_list() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "tether.cli.services", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2
    assert "agent, agent-sim, allocator" in ran.stderr
