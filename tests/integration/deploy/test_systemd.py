"""deploy/systemd: every unit passes `systemd-analyze verify`, and every command a unit runs is
one `tether` has (its `--help` answers)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tether.config import StoreSettings, TlsSettings
from tether.region.certs import SERVICES

ROOT = Path(__file__).resolve().parents[3]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
INSTALLED = "/opt/tether/bin/tether"
"""Where deploy/README.md installs the `tether` command."""


def exec_start(unit: Path) -> list[str]:
    lines = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, unit
    return lines[0].removeprefix("ExecStart=").split()


def test_there_is_a_unit_for_every_service() -> None:
    commands = {exec_start(unit)[1] for unit in UNITS}
    assert commands >= {
        "frontend",
        "scheduler",
        "allocator",
        "broker",
        "health",
        "registry",
        "rebalancer",
        "agent",
        "region",
    }


def test_every_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is missing: install Debian's systemd package")
    # Verify checks that ExecStart's program exists: the units, pointed at this tether.
    tether = str(Path(sys.executable).with_name("tether"))
    for unit in UNITS:
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, tether))
    checked = subprocess.run(
        [analyze, "verify", *(str(tmp_path / unit.name) for unit in UNITS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stderr == "", checked.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda unit: unit.name)
def test_every_unit_runs_a_command_tether_has(unit: Path) -> None:
    program, *args = exec_start(unit)
    assert program == INSTALLED
    words = [arg for arg in args if not arg.startswith(("-", "$", "%"))]
    command = words[: 2 if words[0] == "region" else 1]
    answered = subprocess.run(
        [str(Path(sys.executable).with_name("tether")), *command, "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert answered.returncode == 0, answered.stderr
    # Every option the unit passes is one the command takes.
    for option in re.findall(r"(--[a-z-]+)", " ".join(args)):
        assert option in answered.stdout, (unit.name, option)


def environment_file() -> dict[str, str]:
    lines = (ROOT / "deploy" / "systemd" / "tether.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.mark.parametrize("unit", UNITS, ids=lambda unit: unit.name)
def test_every_unit_serves_and_calls_with_its_own_certificate(unit: Path) -> None:
    command = exec_start(unit)[1]
    role = "admin" if command == "region" else command
    assert role in SERVICES
    settings = dict(
        line.removeprefix("Environment=").split("=", 1)
        for line in unit.read_text().splitlines()
        if line.startswith("Environment=")
    )
    for variable in ("TETHER_TLS_CERT_FILE", "TETHER_STORE_CERT_FILE"):
        assert settings[variable] == f"/etc/tether/tls/{role}.pem", (unit.name, variable)
    for variable in ("TETHER_TLS_KEY_FILE", "TETHER_STORE_KEY_FILE"):
        assert settings[variable] == f"/etc/tether/tls/{role}.key", (unit.name, variable)


def test_the_environment_file_sets_tls_settings_tether_has() -> None:
    environment = environment_file()
    assert environment["TETHER_STORE"].startswith("etcds://")
    assert environment["TETHER_TLS_MUTUAL"] == "true"
    for name in environment:
        if name.startswith("TETHER_TLS_"):
            assert name.removeprefix("TETHER_TLS_").lower() in TlsSettings.model_fields, name
        if name.startswith("TETHER_STORE_"):
            assert name.removeprefix("TETHER_STORE_").lower() in StoreSettings.model_fields, name
