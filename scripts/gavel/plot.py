"""The Gavel simulator's figures: average JCT against load, and solve time against jobs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from benchkit import save_figure


def plot_jct(path: Path, points: list[dict[str, object]], title: str) -> None:
    """One line per policy: average JCT (hours) against jobs per hour, as in Gavel's figures."""
    lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for point in points:
        jct = point["average_jct_h"]
        if isinstance(jct, float):
            lines[str(point["policy"])].append((float(str(point["jobs_per_hour"])), jct))
    figure, axis = plt.subplots(figsize=(8, 5))
    for policy, values in sorted(lines.items()):
        style = "-" if policy.endswith("_perf") else "--"
        axis.plot(*zip(*sorted(values), strict=True), style, marker="o", label=policy)
    axis.set_xlabel("input load (jobs per hour)")
    axis.set_ylabel("average JCT over the measured jobs (hours)")
    axis.set_yscale("log")
    axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    save_figure(figure, path)
    plt.close(figure)


def plot_solve_times(path: Path, points: list[dict[str, object]]) -> None:
    """Per policy, seconds per solve against active jobs: HiGHS solid, cvxpy dashed."""
    highs: dict[str, list[tuple[int, float]]] = defaultdict(list)
    cvxpy: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for point in points:
        policy, jobs = str(point["policy"]), int(str(point["jobs"]))
        highs[policy].append((jobs, float(str(point["solve_s"]))))
        if point.get("cvxpy_s") is not None:
            cvxpy[policy].append((jobs, float(str(point["cvxpy_s"]))))
    figure, axis = plt.subplots(figsize=(9, 6))
    for number, policy in enumerate(sorted(highs)):
        colour = f"C{number % 10}"
        axis.plot(*zip(*highs[policy], strict=True), "-", marker="o", color=colour, label=policy)
        if cvxpy[policy]:
            axis.plot(*zip(*cvxpy[policy], strict=True), "--", color=colour)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("active jobs")
    axis.set_ylabel("seconds per solve (solid: HiGHS; dashed: the same programs in cvxpy/ECOS)")
    axis.legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, path)
    plt.close(figure)
