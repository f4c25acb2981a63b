"""Gavel on a whole region (`tether up`, simulated GPU machines, `tether appsched gavel`): jobs
run on the accelerator type their rounds give them, take turns through suspension, and a job
suspended at a round boundary resumes from the steps it reported, not from zero."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
    simulator: subprocess.Popen[bytes] | None = None
    try:
        running.start()
        with (root / "agent-sim.log").open("ab") as log:
            simulator = subprocess.Popen(
                [
                    *(sys.executable, "-m", "tether.cli.main", "agent-sim"),
                    *("--machines", "2", "--gpus", "1", "--gpu-type", "v100", "--gpu-type", "k80"),
                    *("--profile", str(profile), "--store", running.store_url()),
                    *("--work-dir", str(root / "agent-sim"), "--lease-ttl-s", "2"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=running.env(),
            )
        with running.client() as client:
            wait_for(
                lambda: len(get_json(client, "/v1/machines")["machines"]) == 2,
                timeout_s=60,
                what="the two simulated GPU machines",
            )
            body = {
                "name": "ml",
                "quota": {"resources": {"cpu": 1000, "memory_mib": 1024, "gpus": 2}},
                "preemption": {"grace_s": 2},
                "members": ["admin"],
            }
            created = client.post("/v1/entitlements", json=body)
            assert created.status_code == 201, created.text
        yield running, profile
    finally:
        if simulator is not None:
            simulator.kill()
            simulator.wait()
        running.cleanup()


def accelerator_job(name: str, job_type: str, steps: int) -> dict[str, Any]:
    return {
        "name": name,
        "entitlement": "ml",
        "count": 1,
        "kind": "batch",
        "suspended": True,
        "accelerator": {"job_type": job_type, "total_steps": steps, "scale_factor": 1},
        "task": {
            "package": "trainer",
            "version": "1",
            "command": "train",
            "resources": {"cpu": 100, "memory_mib": 64, "gpus": 1},
        },
    }


@pytest.mark.timeout(240)
def test_jobs_take_turns_on_their_types_and_resume_from_their_steps(
    region: tuple[LocalRegion, Path],
) -> None:
    running, profile = region
    rounds = subprocess.Popen(
        [
            *(sys.executable, "-m", "tether.cli.main", "appsched", "gavel"),
            *("--entitlement", "ml", "--policy", "max_min_fairness_perf"),
            *("--profile", str(profile), "--round-s", str(ROUND_S)),
            *("--url", running.url, "--registry", running.registry_address),
            *("--token", running.token, "--log-level", "INFO"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(running.state_dir / "gavel.log").open("ab"),
        env=running.env(),
    )
    try:
        with running.client() as client:
            # Three jobs, two GPUs: 600 steps take 15 s on the V100 for the fast one (2.5
            # minutes on the K80); the alike ones run as fast anywhere.
            fast = submit(client, accelerator_job("fast", "fast-on-v100", 600))
            alike = [submit(client, accelerator_job(f"alike{n}", "alike", 400)) for n in (1, 2)]
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
    finally:
        rounds.terminate()
        rounds.wait(timeout=60)
    assert rounds.returncode == 0, (running.state_dir / "gavel.log").read_text()[-3000:]
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
