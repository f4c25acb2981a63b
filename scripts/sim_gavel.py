#!/usr/bin/env python3
"""Gavel's heterogeneity-aware policies, simulated: the real policies, mechanism and round
scheduler (`tether.taskcontrol.appsched.gavel`) on a simulated clock, jobs progressing at the
measured throughput of the accelerator type they were given (../shared/data/gavel/).

Experiments (--experiment, default all):

  traces      Gavel's two physical-cluster traces on 8 V100 + 16 P100 + 24 K80 with the
              physical throughputs: average JCT of max_min_fairness.trace under max-min
              fairness, makespan of minimize_makespan.trace under min_total_duration, each
              blind and aware, against the figures of Gavel's own simulator (`error`).
  continuous  Poisson arrivals on 36 V100 + 36 P100 + 36 K80 drawn as the paper draws them
              (--workload philly: multi-GPU jobs at the Philly scale factors; single-gpu: every
              job on one GPU, the generator of the paper's Figure 8); the average JCT of jobs
              --window (the paper's 4000-5000; --quick 200-400) against the load, for
              max-min fairness and FIFO, blind and aware (--policies), averaged over --seeds.
              A policy's sweep stops at the first load it does not sustain (more than
              --max-active jobs active at once, at any seed). Plotted to --plot-jct. On the
              single-gpu workload at the paper's window, max_min_fairness_perf is set beside
              Gavel's own simulator (`gavel_reference_h`).
  solve       Seconds per solve of every policy against the active jobs (32 to 4,096, or
              --solve-jobs), with HiGHS, and the same linear programs in cvxpy with ECOS (up
              to --cvxpy-max jobs).
              Plotted to --plot-solve.
  replay      The first --replay-jobs jobs of max_min_fairness.trace, steps and arrivals times
              --replay-factor, on a real region (`tether up`, 4 V100 + 4 P100 + 4 K80 simulated
              one-GPU machines training at the physical throughputs, `tether appsched gavel`
              with --replay-round-s rounds), against the simulator on the same jobs, cluster
              and rounds: replay_jct_error. Minutes of wall time; not in "all".

Prints one JSON line per point, then a summary line ("benchmark": "gavel") with
jct_ratio_agnostic_over_aware (max-min fairness at the highest load the blind policy
sustains), aware_over_gavel (single-gpu: our aware policy's average JCT over Gavel's, per
load), makespan_ratio_agnostic_over_aware, trace_errors (per policy), solve_s per policy
and job count, and replay_jct_error: each from the experiments that ran.

Usage: .venv/bin/python scripts/sim_gavel.py [--experiment traces] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchkit import default_plot, log, stop_on_signals
from gavel.plot import plot_jct, plot_solve_times
from gavel.replay import replay as run_replay
from gavel.replay import shortened, simulated_jct_s
from gavel.solve_times import problem_of, time_policy
from gavel.workload import WORKLOADS, poisson_jobs, read_trace
from gavel.world import simulate

from tether.model.accelerator import ThroughputProfile
from tether.taskcontrol.appsched.gavel.policies.registry import POLICIES

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "gavel"
PHYSICAL = {"v100": 8, "p100": 16, "k80": 24}
SIMULATED = {"v100": 36, "p100": 36, "k80": 36}
REFERENCE = {
    # Gavel's own simulator (commit c4fa400, cvxpy 1.9 with ECOS, seed 0, 360 s rounds).
    ("max_min_fairness.trace", "max_min_fairness"): 5.20,
    ("max_min_fairness.trace", "max_min_fairness_perf"): 3.82,
    ("minimize_makespan.trace", "min_total_duration"): 20.71,
    ("minimize_makespan.trace", "min_total_duration_perf"): 17.40,
}
GAVEL_SINGLE_GPU = {3.0: 16.3, 5.0: 20.45}
"""Average JCT (hours) of max_min_fairness_perf on the single-gpu workload, jobs 4000-5000, by
jobs per hour: Gavel's own simulator on this machine (36 V100 + 36 P100 + 36 K80, 360 s
rounds, seed 0)."""
CONTINUOUS_POLICIES = ("max_min_fairness", "max_min_fairness_perf", "fifo", "fifo_perf")
SOLVE_JOBS = (32, 64, 128, 256, 512, 1024, 2048, 4096)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--experiment", choices=("traces", "continuous", "solve", "replay", "all"), default="all"
    )
    parser.add_argument("--data", type=Path, default=DATA, help="Gavel's data directory")
    parser.add_argument("--quick", action="store_true", help="a smaller window and sweep")
    parser.add_argument("--round-s", type=float, default=360.0, help="round length (360)")
    parser.add_argument(
        "--loads",
        type=lambda text: [float(value) for value in text.split(",")],
        help="jobs per hour to sweep (default 0.5 to 4 by 0.5; --quick: 1 to 4 by 1)",
    )
    parser.add_argument(
        "--window",
        type=lambda text: tuple(int(value) for value in text.split("-")),
        help="the jobs measured, FIRST-LAST (4000-5000; --quick 200-400)",
    )
    parser.add_argument("--max-active", type=int, default=800, help="saturation (800 jobs)")
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="philly",
        help="how continuous jobs draw their scale factor (philly)",
    )
    parser.add_argument(
        "--policies",
        type=lambda text: text.split(","),
        default=list(CONTINUOUS_POLICIES),
        help=f"policies of the continuous sweep ({','.join(CONTINUOUS_POLICIES)})",
    )
    parser.add_argument(
        "--seeds",
        type=lambda text: [int(value) for value in text.split(",")],
        help="seeds the continuous sweep averages over, e.g. 0,1,2 (default: --seed)",
    )
    parser.add_argument(
        "--solve-jobs",
        type=lambda text: [int(value) for value in text.split(",")],
        help="active jobs to time the solve at (default 32 to 4,096 by doubling; --quick: to "
        "1,024)",
    )
    parser.add_argument("--cvxpy-max", type=int, default=4096, help="largest cvxpy solve")
    parser.add_argument("--replay-jobs", type=int, default=12, help="jobs replayed (12)")
    parser.add_argument(
        "--replay-factor", type=float, default=0.03, help="steps and arrivals times this (0.03)"
    )
    parser.add_argument("--replay-round-s", type=float, default=60.0, help="replay rounds (60)")
    parser.add_argument("--replay-policy", default="max_min_fairness_perf")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plot-jct",
        type=Path,
        default=default_plot("sim_gavel_jct.png"),
        help="where the continuous experiment's plot goes (default: bench-results/)",
    )
    parser.add_argument(
        "--plot-solve",
        type=Path,
        default=default_plot("sim_gavel_solve.png"),
        help="where the solve experiment's plot goes (default: bench-results/)",
    )
    args = parser.parse_args()
    check_args(parser, args)
    return args


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    unknown = [policy for policy in args.policies if policy not in POLICIES]
    if unknown:
        parser.error(f"--policies: unknown {', '.join(unknown)}; known: {', '.join(POLICIES)}")


def emit(line: dict[str, Any]) -> None:
    print(json.dumps(line), flush=True)


def traces(args: argparse.Namespace) -> dict[str, Any]:
    profile = ThroughputProfile.load(args.data / "physical_cluster_isolated_throughputs.json")
    found: dict[str, Any] = {"trace_errors": {}}
    results: dict[str, float] = {}
    for (trace, policy), reference in REFERENCE.items():
        jobs = read_trace(args.data / trace)
        outcome = simulate(jobs, profile, POLICIES[policy], PHYSICAL, round_s=args.round_s)
        metric = "average_jct_h" if trace == "max_min_fairness.trace" else "makespan_h"
        value = outcome.average_jct_s() if metric == "average_jct_h" else outcome.makespan_s
        results[policy] = value / 3600
        error = results[policy] / reference - 1
        found["trace_errors"][policy] = round(error, 4)
        emit(
            {
                "experiment": "traces",
                "trace": trace,
                "policy": policy,
                metric: round(results[policy], 3),
                "gavel_reference_h": reference,
                "error": round(error, 4),
                "rounds": outcome.rounds,
            }
        )
    found["jct_ratio_traces"] = round(
        results["max_min_fairness"] / results["max_min_fairness_perf"], 3
    )
    found["makespan_ratio_agnostic_over_aware"] = round(
        results["min_total_duration"] / results["min_total_duration_perf"], 3
    )
    return found


def continuous(args: argparse.Namespace) -> dict[str, Any]:
    profile = ThroughputProfile.load(args.data / "isolated_throughputs.json")
    first, last = args.window or ((200, 400) if args.quick else (4000, 5000))
    loads = args.loads or ([1.0, 2.0, 3.0, 4.0] if args.quick else [x / 2 for x in range(1, 9)])
    seeds = args.seeds or [args.seed]
    measured = {f"j{number:05d}" for number in range(first, last)}
    points: list[dict[str, Any]] = []
    sustained: dict[str, dict[float, float]] = {policy: {} for policy in args.policies}
    for policy in args.policies:
        for load in sorted(loads):
            # Arrivals go on past the window so that its jobs see the load until they finish.
            point = continuous_point(args, profile, policy, load, seeds, measured, 2 * last)
            point["window"] = f"{first}-{last}"
            if args.workload == "single-gpu" and (first, last) == (4000, 5000):
                point["gavel_reference_h"] = (
                    GAVEL_SINGLE_GPU.get(load) if policy == "max_min_fairness_perf" else None
                )
            emit(point)
            points.append(point)
            if point["average_jct_h"] is None:
                break
            sustained[policy][load] = point["average_jct_h"]
    title = f"{args.workload}: 36 V100 + 36 P100 + 36 K80, jobs {first}-{last}, seeds {seeds}"
    plot_jct(args.plot_jct, points, title)
    found: dict[str, Any] = {"plot_jct": str(args.plot_jct)}
    aware = sustained.get("max_min_fairness_perf", {})
    found["aware_over_gavel"] = {
        load: round(aware[load] / point["gavel_reference_h"], 3)
        for point in points
        if point.get("gavel_reference_h") is not None and (load := point["jobs_per_hour"]) in aware
    }
    blind = sustained.get("max_min_fairness", {})
    common = sorted(set(blind) & set(aware))
    if not common:
        return {**found, "jct_ratio_agnostic_over_aware": None}
    highest = common[-1]
    return {
        **found,
        "jct_ratio_agnostic_over_aware": round(blind[highest] / aware[highest], 3),
        "at_jobs_per_hour": highest,
    }


def continuous_point(
    args: argparse.Namespace,
    profile: ThroughputProfile,
    policy: str,
    load: float,
    seeds: list[int],
    measured: set[str],
    count: int,
) -> dict[str, Any]:
    """One policy at one load, `count` jobs a seed: the average JCT of the `measured` jobs over
    the seeds, None if any seed saturates."""
    per_seed: list[float] = []
    rounds, started = 0, time.monotonic()
    for seed in seeds:
        jobs = poisson_jobs(
            profile, jobs_per_hour=load, count=count, seed=seed, workload=args.workload
        )
        outcome = simulate(
            jobs,
            profile,
            POLICIES[policy],
            SIMULATED,
            round_s=args.round_s,
            until_finished=measured,
            max_active=args.max_active,
        )
        rounds += outcome.rounds
        if outcome.saturated:
            break
        per_seed.append(outcome.average_jct_s(sorted(measured)) / 3600)
    saturated = len(per_seed) < len(seeds)
    return {
        "experiment": "continuous",
        "workload": args.workload,
        "policy": policy,
        "jobs_per_hour": load,
        "seeds": seeds,
        "average_jct_h": None if saturated else round(sum(per_seed) / len(per_seed), 3),
        "jct_h_per_seed": [round(jct, 3) for jct in per_seed],
        "saturated": saturated,
        "rounds": rounds,
        "sim_s": round(time.monotonic() - started, 1),
    }


def solve(args: argparse.Namespace) -> dict[str, Any]:
    profile = ThroughputProfile.load(args.data / "isolated_throughputs.json")
    counts = args.solve_jobs or (SOLVE_JOBS[:6] if args.quick else SOLVE_JOBS)
    points: list[dict[str, Any]] = []
    solve_s: dict[str, dict[int, float]] = {}
    for jobs in counts:
        problem = problem_of(profile, jobs, SIMULATED, seed=args.seed + jobs)
        for policy in POLICIES:
            timing = time_policy(policy, problem, with_cvxpy=jobs <= args.cvxpy_max)
            point: dict[str, Any] = {
                "experiment": "solve",
                "policy": policy,
                "jobs": jobs,
                "solve_s": round(timing.highs_s, 4),
                "programs": timing.programs,
                "cvxpy_s": None if timing.cvxpy_s is None else round(timing.cvxpy_s, 4),
            }
            emit(point)
            points.append(point)
            solve_s.setdefault(policy, {})[jobs] = point["solve_s"]
        log(f"solve: {jobs} jobs timed")
    plot_solve_times(args.plot_solve, points)
    return {"solve_s": solve_s, "plot_solve": str(args.plot_solve)}


def replay(args: argparse.Namespace) -> dict[str, Any]:
    path = args.data / "physical_cluster_isolated_throughputs.json"
    profile = ThroughputProfile.load(path)
    trace = read_trace(args.data / "max_min_fairness.trace")
    jobs = shortened(trace, args.replay_jobs, args.replay_factor)
    counts = {"v100": 4, "p100": 4, "k80": 4}
    simulated = simulated_jct_s(jobs, profile, args.replay_policy, counts, args.replay_round_s)
    physical = run_replay(jobs, path, args.replay_policy, counts, args.replay_round_s)
    sim_s = sum(simulated.values()) / len(simulated)
    real_s = sum(physical.jct_s.values()) / len(physical.jct_s)
    line = {
        "experiment": "replay",
        "policy": args.replay_policy,
        "jobs": len(jobs),
        "round_s": args.replay_round_s,
        "physical_average_jct_s": round(real_s, 1),
        "simulated_average_jct_s": round(sim_s, 1),
        "replay_jct_error": round(real_s / sim_s - 1, 4),
        "wall_s": round(physical.wall_s),
    }
    emit(line)
    return {"replay_jct_error": line["replay_jct_error"]}


def main() -> None:
    stop_on_signals()
    args = parse_args()
    if not args.data.is_dir():
        sys.exit(f"no Gavel data at {args.data} (--data)")
    summary: dict[str, Any] = {"benchmark": "gavel", "round_s": args.round_s}
    experiments = {"traces": traces, "continuous": continuous, "solve": solve, "replay": replay}
    for name, run in experiments.items():
        if args.experiment == name or (args.experiment == "all" and name != "replay"):
            log(f"{name}: running")
            summary.update(run(args))
    emit(summary)


if __name__ == "__main__":
    main()
