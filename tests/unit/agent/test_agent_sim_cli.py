"""`tether agent-sim`'s options: the fleet they build and the errors for bad values."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tests.support.cli import Served
from tests.support.cli import served as served
from tether.agent.simulated import AgentFleet
from tether.cli.main import app

runner = CliRunner()


def test_options_build_the_fleet(served: list[Served], tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            *("agent-sim", "--machines", "12", "--dc", "dc1", "--dc", "dc3"),
            *("--msbs-per-dc", "3", "--rack-size", "2", "--cpu", "8000"),
            *("--work-dir", str(tmp_path), "--store", "etcd://127.0.0.1:2379"),
        ],
    )
    assert result.exit_code == 0, result.output
    [(fleet, url, log_level)] = served
    assert isinstance(fleet, AgentFleet)
    assert (url, log_level) == ("etcd://127.0.0.1:2379", "WARNING")
    machines = fleet.machines
    assert [m.id for m in machines[:2]] == ["sim-01", "sim-02"]
    assert {(m.topology.dc, m.topology.msb) for m in machines} == {
        (dc, f"msb{n}") for dc in ("dc1", "dc3") for n in (1, 2, 3)
    }
    assert {m.capacity.cpu for m in machines} == {8000}


def test_a_bad_name_is_refused_naming_its_option(served: list[Served]) -> None:
    result = runner.invoke(app, ["agent-sim", "--id-prefix", "Not_A_Label"])
    assert result.exit_code == 2
    assert "--id-prefix" in result.output
    assert not served


def test_machines_with_a_trace_in_the_directory_are_harvest_machines(
    served: list[Served], tmp_path: Path
) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "sim-2.jsonl").write_text('{"at_s": 60, "usable": {"cpu": 2000}}\n')
    (traces / "other.jsonl").write_text("not read: no such machine\n")
    result = runner.invoke(
        app, ["agent-sim", "--machines", "3", "--cpu", "8000", "--harvest-traces", str(traces)]
    )
    assert result.exit_code == 0, result.output
    [(fleet, _, _)] = served
    assert isinstance(fleet, AgentFleet)
    assert list(fleet.harvest) == ["sim-2"]
    assert fleet.harvest["sim-2"][0].usable is not None
    assert fleet.harvest["sim-2"][0].usable.cpu == 2000


def test_a_bad_trace_or_directory_is_refused(served: list[Served], tmp_path: Path) -> None:
    (tmp_path / "sim-1.jsonl").write_text('{"at_s": 60, "usable": {"cpu": 9000}}\n')
    result = runner.invoke(
        app, ["agent-sim", "--machines", "1", "--cpu", "8000", "--harvest-traces", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "sim-1.jsonl:1: usable exceeds the machine's capacity: cpu 9000" in result.output
    missing = runner.invoke(app, ["agent-sim", "--harvest-traces", str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert "is not a directory" in missing.output
    assert not served
