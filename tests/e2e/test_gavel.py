"""Gavel on a whole region (`tether up`, simulated GPU machines, `tether appsched gavel`): jobs
run on the accelerator type their rounds give them, take turns through suspension, and a job
suspended at a round boundary resumes from the steps it reported, not from zero."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.gpu_region import (
    accelerator_job,
    create_gpu_entitlement,
    start_gavel,
    start_gpu_machines,
)
from tests.support.harness import LocalRegion, get_json, submit, wait_for

PROFILE = {
    "v100": {"fast-on-v100": {"1": 40.0}, "alike": {"1": 20.0}},
    "k80": {"fast-on-v100": {"1": 4.0}, "alike": {"1": 20.0}},
}
ROUND_S = 3.0


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalRegion, Path]]:
    """A region whose machines are one V100 and one K80 (`tether agent-sim`), and a profile."""
    root = tmp_path_factory.mktemp("gavel")
    profile = root / "throughputs.json"
    profile.write_text(json.dumps(PROFILE))
    running = LocalRegion(root / "tether", agents=0)
    fleet: subprocess.Popen[bytes] | None = None
    try:
        running.start()
        fleet = start_gpu_machines(running, ["v100", "k80"], profile, root / "agent-sim")
        create_gpu_entitlement(running, "ml", gpus=2, grace_s=2)
        yield running, profile
    finally:
        if fleet is not None:
            fleet.kill()
            fleet.wait()
        running.cleanup()


@pytest.mark.timeout(240)
def test_jobs_take_turns_on_their_types_and_resume_from_their_steps(
    region: tuple[LocalRegion, Path],
) -> None:
    running, profile = region
    log = running.state_dir / "gavel.log"
    rounds = start_gavel(running, "ml", "max_min_fairness_perf", profile, ROUND_S, log)
    try:
        with running.client() as client:
            # Three jobs, two GPUs: 300 steps take 7.5 s on the V100 for the fast one (75 s on
            # the K80); the alike ones run as fast anywhere.
            fast = submit(client, accelerator_job("fast", "ml", "fast-on-v100", 300))
            alike = [
                submit(client, accelerator_job(f"alike{n}", "ml", "alike", 200)) for n in (1, 2)
            ]
            seen: dict[str, list[float]] = {handle: [] for handle in (fast, *alike)}

            def all_done() -> bool:
                done = True
                for handle, steps in seen.items():
                    view = get_json(client, f"/v1/jobs/{handle}")
                    if view["progress"] is not None:
                        steps.append(view["progress"])
                    done &= view["tasks"].get("exited", 0) == 1
                return done

            wait_for(all_done, timeout_s=180, what="every accelerator job to finish")
            views = {handle: get_json(client, f"/v1/jobs/{handle}") for handle in seen}
            [report] = get_json(client, "/v1/accelerator-reports")["accelerator_reports"]
    finally:
        rounds.terminate()
        rounds.wait(timeout=60)
    assert rounds.returncode == 0, log.read_text()[-3000:]
    # Each round reported itself for the dashboard.
    assert (report["entitlement"], report["policy"]) == ("ml", "max_min_fairness_perf")
    assert report["rounds"] >= 2
    assert report["accelerators"] == {"v100": 1, "k80": 1}
    # The fast job ran where it is fast: the rounds pinned it there.
    (pinned,) = views[fast]["spec"]["placement"]["constraints"]
    assert pinned == {"attribute": "gpu_type", "op": "==", "value": "v100", "values": []}
    # Someone waited its turn: a suspension, and a resumption from where it stopped.
    suspended = [
        handle
        for handle, view in views.items()
        if any(event.get("cause") == "suspended" for event in view["admission"]["history"])
    ]
    assert suspended, "three jobs on two GPUs, yet none was ever suspended"
    for handle, steps in seen.items():
        # Steps never went back: each attempt started from the last one's.
        assert steps == sorted(steps), (handle, steps)
        assert views[handle]["progress"] == views[handle]["spec"]["accelerator"]["total_steps"]
