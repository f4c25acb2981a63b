"""`scripts/sim_taskcontrol.py` at a small scale: the real scheduler, allocator, registry and
reference controllers against a private etcd, so the evaluation keeps working."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.scripts import RUN_ELSEWHERE

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "sim_taskcontrol.py"
_, PROMISED = RUN_ELSEWHERE["sim_taskcontrol.py"]


def test_the_replicas_controller_never_lets_two_replicas_down_outside_the_failure(
    tmp_path: Path,
) -> None:
    plot = tmp_path / "sim.png"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            *("--tasks", "24", "--shards", "120", "--msbs", "4", "--fail-tasks", "4"),
            *("--start-s", "0.5", "--timeout-s", "150", "--plot", str(plot)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = {r["controller"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert set(results) == {"replicas", "rolling"}
    for result in results.values():
        assert sorted(PROMISED - result.keys()) == []
    replicas = results["replicas"]
    assert replicas["shards_two_down_outside_failure"] == 0
    assert replicas["failed_tasks"] >= 1
    assert replicas["tasks_acked_first_batch"] >= 1
    assert replicas["shards_one_down_peak"] > 0
    assert replicas["update_duration_s"] > 0
    assert results["rolling"]["tasks_acked_first_batch"] == 2  # 10% of 24, at least one
    assert plot.stat().st_size > 10_000


def test_bad_arguments_are_refused_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--controllers", "replicas,chaos"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown controller(s): chaos" in done.stderr
    assert "Traceback" not in done.stderr
