"""The scripts under scripts/ that start a region, at their smallest: each prints the JSON line
its `--help` promises and leaves nothing behind, and a signal stops it, removing the region and
every process it started."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.scripts import SMOKE_RUNS, SmokeRun, smoke, stop

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("run", [run for run in SMOKE_RUNS if run.region], ids=lambda run: run.id)
def test_a_region_script_prints_what_its_help_promises(run: SmokeRun, tmp_path: Path) -> None:
    smoke(run, tmp_path, timeout_s=240)


@pytest.mark.parametrize(
    "run", [run for run in SMOKE_RUNS if run.stopped_by], ids=lambda run: run.id
)
def test_a_signal_removes_everything_a_script_started(run: SmokeRun, tmp_path: Path) -> None:
    stop(run, tmp_path)
