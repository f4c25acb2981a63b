"""The physical replay: a shortened Gavel trace on a real region, against the simulator.

The jobs go to a region of simulated GPU machines (`tether up`, `tether agent-sim --gpu-type
... --profile`) under `tether appsched gavel`, and through the simulator, compared by average
JCT."""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchkit import log

from gavel.workload import TraceJob
from gavel.world import simulate
from tests.support.gpu_region import (
    accelerator_job,
    create_gpu_entitlement,
    start_gavel,
    start_gpu_machines,
)
from tests.support.harness import LocalRegion, get_json, submit
from tether.model.accelerator import ThroughputProfile
from tether.taskcontrol.appsched.gavel.policies.registry import POLICIES

ENTITLEMENT = "replay"
POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class Replayed:
    jct_s: dict[str, float]
    """Job name -> seconds from its submission to its last task's exit (as polled)."""
    wall_s: float


def shortened(jobs: list[TraceJob], count: int, factor: float) -> list[TraceJob]:
    """The first `count` jobs with their steps and arrivals times `factor`: the same contention,
    in less time."""
    return [
        dataclasses.replace(
            job, total_steps=job.total_steps * factor, arrival_s=job.arrival_s * factor
        )
        for job in sorted(jobs, key=lambda job: job.arrival_s)[:count]
    ]


def simulated_jct_s(
    jobs: list[TraceJob],
    profile: ThroughputProfile,
    policy: str,
    counts: dict[str, int],
    round_s: float,
) -> dict[str, float]:
    return simulate(jobs, profile, POLICIES[policy], counts, round_s=round_s).jct_s


def replay(
    jobs: list[TraceJob], profile_path: Path, policy: str, counts: dict[str, int], round_s: float
) -> Replayed:
    """Runs `jobs` on a fresh region with one simulated machine per GPU."""
    gpu_types = [kind for kind, count in sorted(counts.items()) for _ in range(count)]
    with tempfile.TemporaryDirectory(prefix="gavel-replay-") as scratch:
        root = Path(scratch)
        region = LocalRegion(root / "tether", agents=0)
        fleet = rounds = None
        try:
            log("replay: starting a region")
            region.start()
            fleet = start_gpu_machines(region, gpu_types, profile_path, root / "agent-sim")
            create_gpu_entitlement(region, ENTITLEMENT, gpus=len(gpu_types), grace_s=2)
            rounds = start_gavel(
                region, ENTITLEMENT, policy, profile_path, round_s, root / "gavel.log"
            )
            return _run(region, jobs)
        finally:
            for process in (rounds, fleet):
                if process is not None:
                    process.terminate()
                    process.wait(timeout=60)
            region.cleanup()


def _run(region: LocalRegion, jobs: list[TraceJob]) -> Replayed:
    """Submits each job at its arrival and polls until every one has finished."""
    started = time.monotonic()
    pending = sorted(jobs, key=lambda job: job.arrival_s)
    submitted: dict[str, tuple[str, float]] = {}
    finished: dict[str, float] = {}
    with region.client() as client:
        while len(finished) < len(jobs):
            now = time.monotonic() - started
            while pending and pending[0].arrival_s <= now:
                job = pending.pop(0)
                spec = accelerator_job(
                    job.name, ENTITLEMENT, job.job_type, job.total_steps, job.scale_factor
                )
                submitted[job.name] = (submit(client, spec), time.monotonic() - started)
            for name, (handle, at) in submitted.items():
                if name in finished:
                    continue
                view = get_json(client, f"/v1/jobs/{handle}")
                if view["tasks"].get("exited", 0) >= view["count"]:
                    finished[name] = time.monotonic() - started - at
                    took = finished[name]
                    log(f"replay: {name} done after {took:.0f} s, {len(finished)}/{len(jobs)}")
            time.sleep(POLL_S)
    return Replayed(finished, time.monotonic() - started)
