"""Service commands run on their own (`python -m tether.cli.services`), as `tether up` starts
them, and are the same commands `tether` itself offers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def modules_after(call: str) -> tuple[str, str]:
    """Runs `call` in a fresh interpreter; its output, and the Tether modules it loaded."""
    probe = (
        f"import sys\ntry:\n    {call}\nexcept SystemExit: pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('tether.')))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return ran.stdout, ran.stdout.strip().splitlines()[-1]


def test_other_commands_import_no_service() -> None:
    _, loaded = modules_after("from tether.cli.main import app; app(['version'])")
    for service in ("agent", "allocator", "frontend", "scheduler", "broker", "health"):
        assert f"'tether.{service}.service'" not in loaded
    assert "'tether.cli.appsched'" not in loaded


def test_a_service_runs_without_the_rest_of_the_cli() -> None:
    output, loaded = modules_after(
        "from tether.cli.services import main; main(['health', '--help'])"
    )
    assert "Usage: tether health" in output
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


def test_a_simulated_fleet_refuses_a_profile_it_cannot_read(tmp_path: Path) -> None:
    bad = tmp_path / "throughputs.json"
    bad.write_text('{"v100": {"ResNet-50": {"one": 4.0}}}')
    for path, says in ((bad, "scale factor 'one' is not 1 or more"), (tmp_path / "nope", "nope")):
        ran = CliRunner().invoke(app, ["agent-sim", "--profile", str(path)])
        assert ran.exit_code == 2
        assert "error: --profile:" in ran.output
        assert says in ran.output
