"""`tether agent`'s options: the Machine they build and the errors for bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.support.cli import Served
from tether.agent.service import Agent
from tether.cli import agent as agent_cli
from tether.cli.main import app
from tether.model import Machine

runner = CliRunner()


def served_agent(served: list[Served]) -> Agent:
    """The one agent the command would have run."""
    [(agent, _, _)] = served
    assert isinstance(agent, Agent)
    return agent


def test_options_build_the_machine(served: list[Served], tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "agent",
            "--machine-id", "m7",
            "--dc", "dc2",
            "--msb", "msb3",
            "--rack", "r4",
            "--cpu", "2500",
            "--memory-mib", "1024",
            "--disk-gib", "10",
            "--gpus", "1",
            "--attribute", "zone=a",
            "--attribute", "ssd=",
            "--work-dir", str(tmp_path / "w"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    agent = served_agent(served)
    machine = agent.machine
    assert machine.id == "m7"
    assert machine.hostname == "m7"
    assert (machine.topology.region, machine.topology.dc) == ("local", "dc2")
    assert (machine.topology.msb, machine.topology.rack) == ("msb3", "r4")
    assert machine.hardware_type == "local"
    assert (machine.capacity.cpu, machine.capacity.memory_mib) == (2500, 1024)
    assert (machine.capacity.disk_gib, machine.capacity.gpus) == (10, 1)
    assert machine.attributes == {"zone": "a", "ssd": ""}
    assert agent.work_dir.root == (tmp_path / "w").resolve()


def test_defaults_describe_this_host(served: list[Served]) -> None:
    result = runner.invoke(app, ["agent", "--machine-id", "m1"])
    assert result.exit_code == 0, result.output
    agent = served_agent(served)
    assert agent.machine.capacity.cpu >= 1000
    assert agent.machine.capacity.memory_mib > 0
    assert agent.work_dir.root.parts[-2:] == ("agents", "m1")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--machine-id", "Bad_Id"], "--machine-id"),
        (["--machine-id", "m1", "--dc", "DC!"], "--dc"),
        (["--machine-id", "m1", "--hostname", "h" * 300], "--hostname"),
        (["--machine-id", "m1", "--attribute", "novalue"], "is not KEY=VALUE"),
        (["--machine-id", "m1", "--attribute", "a=1", "--attribute", "a=2"], "given twice"),
        (["--machine-id", "m1", "--attribute", "Bad Key=1"], "--attribute Bad Key"),
        (["--machine-id", "m1", "--cpu", "-5"], "--cpu"),
        (["--machine-id", "m1", "--memory-mib", "lots"], "--memory-mib"),
        ([], "--machine-id"),
    ],
)
def test_bad_values_exit_2_with_a_message(
    served: list[Served], arguments: list[str], message: str
) -> None:
    result = runner.invoke(app, ["agent", *arguments])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert not served


def test_bad_setting_from_the_environment(
    served: list[Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_AGENT_LEASE_TTL_S", "0")
    result = runner.invoke(app, ["agent", "--machine-id", "m1"])
    assert result.exit_code == 2
    assert "TETHER_AGENT_LEASE_TTL_S" in result.output


def test_build_machine_accepts_a_valid_description() -> None:
    fields: dict[str, Any] = {
        "id": "m1",
        "hostname": "m1.example",
        "topology": {"region": "r", "dc": "d", "msb": "m", "rack": "k"},
        "hardware_type": "local",
        "capacity": {"cpu": 1000},
    }
    assert isinstance(agent_cli.build_machine(fields), Machine)
