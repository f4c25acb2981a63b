"""The Gavel simulator's generated workloads (scripts/gavel/workload.py): the Philly scale
factors, or one GPU a job as the paper's Figure 8 draws them."""

from __future__ import annotations

import sys

import pytest

from tests.support.scripts import SCRIPTS
from tether.model.accelerator import ThroughputProfile

sys.path.insert(0, str(SCRIPTS))

from gavel.workload import poisson_jobs  # scripts/ is on the path, not a package

DATA = SCRIPTS.parent.parent / "shared" / "data" / "gavel" / "isolated_throughputs.json"


@pytest.fixture(scope="module")
def profile() -> ThroughputProfile:
    return ThroughputProfile.load(DATA)


def test_the_single_gpu_workload_gives_every_job_one_gpu(profile: ThroughputProfile) -> None:
    jobs = poisson_jobs(profile, jobs_per_hour=3, count=500, seed=0, workload="single-gpu")
    assert {job.scale_factor for job in jobs} == {1}
    philly = poisson_jobs(profile, jobs_per_hour=3, count=500, seed=0)
    assert {job.scale_factor for job in philly} == {1, 2, 4, 8}


def test_an_unknown_workload_is_refused(profile: ThroughputProfile) -> None:
    with pytest.raises(ValueError, match="unknown workload 'multi'"):
        poisson_jobs(profile, jobs_per_hour=3, count=5, seed=0, workload="multi")
