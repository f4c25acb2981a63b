"""A region of simulated GPU machines and Gavel's rounds over it, for the end-to-end test and the
physical replay of `scripts/sim_gavel.py`: `tether agent-sim` machines of given GPU types that
train at a profile's speed, an entitlement of their GPUs, accelerator jobs and `tether appsched
gavel`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.harness import LocalRegion, start_simulated_machines


def start_gpu_machines(
    region: LocalRegion, gpu_types: list[str], profile: Path, work_dir: Path
) -> subprocess.Popen[bytes]:
    """One simulated machine of one GPU per entry of `gpu_types`; returns once all are up."""
    kinds = [argument for kind in gpu_types for argument in ("--gpu-type", kind)]
    return start_simulated_machines(
        region, len(gpu_types), work_dir, "--gpus", "1", *kinds, "--profile", str(profile)
    )


def create_gpu_entitlement(region: LocalRegion, name: str, gpus: int, grace_s: float) -> None:
    """An entitlement of the admin's with room for `gpus` one-GPU tasks."""
    body = {
        "name": name,
        "quota": {"resources": {"cpu": 100 * gpus, "memory_mib": 64 * gpus, "gpus": gpus}},
        "preemption": {"grace_s": grace_s},
        "members": ["admin"],
    }
    with region.client() as client:
        created = client.post("/v1/entitlements", json=body)
        assert created.status_code == 201, created.text


def accelerator_job(
    name: str, entitlement: str, job_type: str, steps: float, scale_factor: int = 1
) -> dict[str, Any]:
    """A suspended training job of `scale_factor` one-GPU workers, for Gavel's rounds."""
    return {
        "name": name,
        "entitlement": entitlement,
        "count": scale_factor,
        "kind": "batch",
        "suspended": True,
        "accelerator": {
            "job_type": job_type,
            "total_steps": steps,
            "scale_factor": scale_factor,
        },
        "placement": {"gang": scale_factor > 1},
        "task": {
            "package": "trainer",
            "version": "1",
            "command": "train",
            "resources": {"cpu": 100, "memory_mib": 64, "gpus": 1},
        },
    }


def start_gavel(
    region: LocalRegion, entitlement: str, policy: str, profile: Path, round_s: float, log: Path
) -> subprocess.Popen[bytes]:
    """`tether appsched gavel` for the entitlement, logging to `log`."""
    with log.open("ab") as output:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "tether.cli.main", "appsched", "gavel"),
                *("--entitlement", entitlement, "--policy", policy),
                *("--profile", str(profile), "--round-s", str(round_s)),
                *("--url", region.url, "--registry", region.registry_address),
                *("--token", region.token, "--log-level", "INFO"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=output,
            env=region.env(),
        )
