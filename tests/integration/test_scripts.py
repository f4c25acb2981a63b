"""Every script under scripts/ has a smoke run in the suite; those that start no region run
here: each prints the JSON line its `--help` promises and leaves nothing behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.scripts import RUN_ELSEWHERE, SCRIPTS, SMOKE_RUNS, SmokeRun, smoke, unpromised

ROOT = SCRIPTS.parent


def test_every_script_has_a_smoke_run() -> None:
    scripts = {path.name for path in SCRIPTS.glob("*.py")}
    assert scripts == {run.script for run in SMOKE_RUNS} | set(RUN_ELSEWHERE)
    for script, (module, _) in RUN_ELSEWHERE.items():
        assert f'"{script}"' in (ROOT / module).read_text(), f"{module} does not run {script}"


@pytest.mark.parametrize(
    ("script", "keys"),
    [(run.script, run.keys) for run in SMOKE_RUNS]
    + [(script, keys) for script, (_, keys) in RUN_ELSEWHERE.items()],
)
def test_the_help_names_every_key_of_the_json_line(script: str, keys: frozenset[str]) -> None:
    assert unpromised(script, keys) == []


@pytest.mark.parametrize(
    "run", [run for run in SMOKE_RUNS if not run.region], ids=lambda run: run.id
)
def test_a_script_prints_what_its_help_promises(run: SmokeRun, tmp_path: Path) -> None:
    smoke(run, tmp_path, timeout_s=120)


def test_bad_arguments_are_refused_without_a_traceback(tmp_path: Path) -> None:
    refused = SmokeRun("bench_queue.py", ("--queued", "3", "--passes", "5"), frozenset())
    done = subprocess.run(refused.command(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--passes must not exceed --queued" in done.stderr
    assert "Traceback" not in done.stderr
