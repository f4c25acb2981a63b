"""A harvest machine's capacity trace: read and checked line by line (`tether agent
--harvest-trace` exits 2 naming the line), each step applied to the machine, and replayed in
time."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.cli import Served
from tests.support.machines import make_machine
from tether.agent.harvest import HarvestTraceError, harvest_at, read_trace, replay
from tether.agent.service import Agent
from tether.cli.main import app
from tether.model import Resources
from tether.model.machine import HarvestStep

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CAPACITY = Resources(cpu=4000, memory_mib=8192)
runner = CliRunner()
AGENT = ["agent", "--machine-id", "h1", "--cpu", "4000"]


def trace(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_trace_is_read_in_order_skipping_blank_lines_and_comments(tmp_path: Path) -> None:
    path = trace(
        tmp_path,
        "# a harvest VM of the test",
        '{"at_s": 0, "usable": {"cpu": 2000}}',
        "",
        '{"at_s": 600, "evict_in_s": 30}',
    )
    assert read_trace(path, CAPACITY) == [
        HarvestStep(at_s=0, usable=Resources(cpu=2000)),
        HarvestStep(at_s=600, evict_in_s=30),
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"at_s": 5, "usable": {"cpu": 5000}}', "usable exceeds the machine's capacity: cpu 5000"),
        ('{"at_s": 5, "usable": {"cpu": -1}}', "usable.cpu: Input should be greater than or equal"),
        ('{"at_s": -1}', "at_s: Input should be greater than or equal to 0"),
        ('{"at_s": 5, "evict_in": 3}', "evict_in: Extra inputs are not permitted"),
        ("not json", "Invalid JSON"),
    ],
)
def test_a_bad_line_is_refused_by_its_number(tmp_path: Path, line: str, problem: str) -> None:
    path = trace(tmp_path, '{"at_s": 0}', line)
    with pytest.raises(HarvestTraceError, match=f"trace.jsonl:2: .*{problem}"):
        read_trace(path, CAPACITY)


def test_steps_out_of_order_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(HarvestTraceError, match=r"at_s 5\.0 comes before the line above"):
        read_trace(trace(tmp_path, '{"at_s": 10}', '{"at_s": 5}'), CAPACITY)
    with pytest.raises(HarvestTraceError, match="No such file or directory"):
        read_trace(tmp_path / "missing.jsonl", CAPACITY)


def test_a_step_sets_the_usable_share_and_the_eviction_notice() -> None:
    machine = make_machine("h1", capacity=CAPACITY)
    shrunk = harvest_at(machine, HarvestStep(at_s=0, usable=Resources(cpu=1000)), NOW)
    assert shrunk.harvest is not None
    assert (shrunk.usable(), shrunk.harvest.evict_by) == (Resources(cpu=1000), None)
    # An eviction notice keeps the share; the next step without one withdraws it.
    evicted = harvest_at(shrunk, HarvestStep(at_s=9, evict_in_s=30), NOW)
    assert evicted.harvest is not None
    assert (evicted.usable(), evicted.harvest.evict_by) == (
        Resources(cpu=1000),
        NOW + timedelta(seconds=30),
    )
    assert harvest_at(evicted, HarvestStep(at_s=20), NOW).harvest.evict_by is None  # type: ignore[union-attr]
    # A regular machine's first step starts from the whole hardware.
    assert harvest_at(machine, HarvestStep(at_s=0), NOW).usable() == CAPACITY


async def test_steps_are_replayed_at_their_time() -> None:
    seen: list[tuple[float, float]] = []
    started = time.monotonic()

    async def changed(step: HarvestStep) -> None:
        seen.append((step.at_s, time.monotonic() - started))

    steps = [HarvestStep(at_s=0), HarvestStep(at_s=0.2), HarvestStep(at_s=0.4)]
    await asyncio.wait_for(replay(steps, started, changed), timeout=5)
    assert [at for at, _ in seen] == [0, 0.2, 0.4]
    for at, when in seen:
        assert when >= at


def test_the_cli_refuses_a_bad_trace_and_passes_a_good_one(
    served: list[Served], tmp_path: Path
) -> None:
    bad = trace(tmp_path, '{"at_s": 0, "usable": {"cpu": 9000}}')
    result = runner.invoke(
        app, ["agent", "--machine-id", "h1", "--cpu", "4000", "--harvest-trace", str(bad)]
    )
    assert result.exit_code == 2
    assert "--harvest-trace:" in result.output
    assert "trace.jsonl:1: usable exceeds the machine's capacity" in result.output
    assert served == []
    good = trace(tmp_path, '{"at_s": 0, "usable": {"cpu": 1000}}')
    result = runner.invoke(
        app, ["agent", "--machine-id", "h1", "--cpu", "4000", "--harvest-trace", str(good)]
    )
    assert result.exit_code == 0, result.output
    [(agent, _, _)] = served
    assert isinstance(agent, Agent)
