"""The policies' linear programs on a program HiGHS once left without a verdict."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tether.taskcontrol.appsched.gavel.policies import lp
from tether.taskcontrol.appsched.gavel.problem import AcceleratorJob, Problem

DATA = Path(__file__).parent / "data"


def test_a_warm_start_that_ends_without_a_verdict_is_solved_from_scratch() -> None:
    # Met in the continuous simulation (4 jobs/hour, seed 0): max_min_fairness_perf's second
    # program, run from the first's basis, ended "Unknown" and the simulation stopped.
    saved = np.load(DATA / "warm_start_unknown.npz")
    kinds = [str(kind) for kind in saved["accelerators"]]
    jobs = [
        AcceleratorJob(f"j{number}", int(scale), dict(zip(kinds, speeds.tolist(), strict=True)))
        for number, (scale, speeds) in enumerate(
            zip(saved["scale_factors"], saved["throughputs"], strict=True)
        )
    ]
    problem = Problem.of(jobs, dict(zip(kinds, saved["counts"].astype(int).tolist(), strict=True)))
    coefficients = saved["coefficients"]
    allocation = lp.max_min(problem, coefficients)
    # Every job that can run keeps the highest minimum, and the accelerators suffice.
    floor = lp.max_min_value(problem, coefficients)
    values = (coefficients * allocation).sum(axis=1)
    assert values[coefficients.sum(axis=1) > 0].min() >= floor * (1 - 1e-6)
    assert allocation.sum(axis=1).max() <= 1 + 1e-9
    used = (allocation * problem.scale_factors[:, None]).sum(axis=0)
    assert (used <= problem.counts + 1e-6).all()
    # What the second program adds: no accelerator idles while a job could use it.
    assert np.allclose(used, problem.counts)
