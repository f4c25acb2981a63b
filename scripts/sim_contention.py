#!/usr/bin/env python3
"""A contended region, simulated: fair share, deadlines and preemption under saturation.

The scheduler's own admission queues (`AdmissionQueues`: order, borrowing, weighted dominant
resource fairness, victim selection, rate limits) and the allocator's own index, planner and
preemption check run in this process on a simulated clock. The region is --machines GPU
machines (8 GPUs each) under a tree region -> 2 orgs (weights 3:1) -> 3 teams each (1:1:2);
every level guarantees --guaranteed of its weighted share and lends the rest. Jobs arrive by
Poisson processes at --load times each team's weighted share, with the Philly task counts and
durations of Gavel's workloads (../shared/data/gavel/README.md); --deadline-share of them have
deadlines, and --bursts bursts of high-priority jobs preempt. A preempted job checkpoints within
its grace and resumes later; a machine its last task leaves goes back to the free pool at once.

The same arrivals run twice: with deadline-aware order (Cameo: priority, then latest start) and
with FIFO order (priority, then submission time). Fair share is measured on the first run while
the region is saturated (every team has a job waiting). Prints one JSON line:

  utilization          busy GPU-time / GPU-time after the warm-up
  jain_index           Jain's index of the teams' shares divided by their weighted shares,
                       averaged over saturated time (null when the region never was)
  max_share_error      worst relative distance of a team's average share from its weighted share
  deadline_miss_rate   jobs finished after their deadline (or not by it), deadline-aware order
  fifo_deadline_miss_rate   the same arrivals in FIFO order
  queue_wait_p50_s/p99_s    per priority band (jobs still waiting count their wait so far)
  preemptions          jobs preempted, and by cause (priority, reclaim, fair-share)
  placement_checks     preemptions proposed by quota whose victims the allocator's own choice
                       picked machine by machine (in process); refused_by_placement of them
                       would free no machines the preemptor fits even with every candidate
                       stopped; refused_by_rule, the machines' victims would break a rule (the
                       rate limit, the fair-share cost limit, a side's fair share);
                       placement_check_p99_ms what one choice costs
                       (sim_decision_p99_ms, a decider pass, leaves the choices out)
  over_quota_passes    decider passes after which an entitlement held beyond its quota and
                       borrowing limit (QuotaTree.over_quota), in either run: must be 0
  admission_decision_p99_ms  a pass with 10,000 jobs queued in one entitlement (--deep-queue)

and draws each team's share over time against its weighted share (--plot).

Usage: .venv/bin/python scripts/sim_contention.py [--days 10] [--plot docs/sim_contention.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_queue import decisions
from benchkit import default_plot, log, stop_on_signals
from contention.plot import plot_shares
from contention.workload import HIGH_PRIORITY, Arrival, arrivals
from contention.world import World

DAY_S = 86_400.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--machines", type=int, default=128, help="8-GPU machines (128)")
    parser.add_argument("--days", type=float, default=10, help="simulated days of arrivals (10)")
    parser.add_argument("--warmup-days", type=float, default=2, help="not measured (2)")
    parser.add_argument("--load", type=float, default=1.1, help="offered load per team (1.1)")
    parser.add_argument(
        "--guaranteed", type=float, default=0.8, help="share of each weighted share guaranteed"
    )
    parser.add_argument("--deadline-share", type=float, default=0.3, help="jobs with deadlines")
    parser.add_argument("--bursts", type=int, default=6, help="high-priority bursts (6)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--deep-queue", type=int, default=10_000, help="jobs queued (10000)")
    parser.add_argument(
        "--plot",
        type=Path,
        default=default_plot("sim_contention.png"),
        help="where the shares' plot goes (default: bench-results/, which git ignores)",
    )
    return parser.parse_args()


def simulate(args: argparse.Namespace, jobs: list[Arrival], *, deadline_aware: bool) -> World:
    world = World(
        args.machines,
        args.guaranteed,
        deadline_aware=deadline_aware,
        warmup_s=args.warmup_days * DAY_S,
        sample_s=1800,
    )
    started = time.monotonic()
    world.run(jobs, args.days * DAY_S)
    order = "deadline-aware" if deadline_aware else "FIFO"
    log(f"{order}: {len(jobs)} jobs in {time.monotonic() - started:.0f} s")
    return world


def miss_rate(world: World, horizon_s: float) -> float:
    """Of the jobs whose deadline falls within the run, those not finished by it."""
    due = [job for job in world.jobs.values() if (d := job.arrival.deadline_s) and d <= horizon_s]
    missed = [
        job
        for job in due
        if job.finished_s is None or job.finished_s > (job.arrival.deadline_s or 0.0)
    ]
    return round(len(missed) / len(due), 4) if due else 0.0


def waits(world: World, horizon_s: float) -> dict[str, float]:
    """Queue wait percentiles per priority band."""
    found: dict[str, list[float]] = {"normal": [], "high": []}
    for job in world.jobs.values():
        band = "high" if job.arrival.job.spec.priority >= HIGH_PRIORITY else "normal"
        admitted = horizon_s if job.admitted_s is None else job.admitted_s
        found[band].append(admitted - job.arrival.at_s)
    result = {}
    for band, values in found.items():
        for percentile in (50, 99):
            value = float(np.percentile(values, percentile)) if values else 0.0
            result[f"queue_wait_p{percentile}_s_{band}"] = round(value, 1)
    return result


def fairness(world: World) -> dict[str, float | None]:
    """Fair share while saturated; None when the region never was (too short a run)."""
    tally = world.tally
    if not tally.saturated_s:
        return {"saturated_share": 0.0, "jain_index": None, "max_share_error": None}
    average = {team: tally.share_s[team] / tally.saturated_s for team in world.teams}
    errors = [abs(average[team] / world.targets[team] - 1) for team in world.teams]
    return {
        "saturated_share": round(tally.saturated_s / tally.measured_s, 3),
        "jain_index": round(tally.jain_s / tally.saturated_s, 4),
        "max_share_error": round(max(errors), 4),
    }


def main() -> None:
    stop_on_signals()
    args = parse_args()
    horizon_s = args.days * DAY_S
    jobs = arrivals(
        args.machines,
        load=args.load,
        horizon_s=horizon_s,
        deadline_share=args.deadline_share,
        bursts=args.bursts,
        seed=args.seed,
    )
    log(f"{len(jobs)} jobs over {args.days:g} days on {args.machines * 8} GPUs")
    aware = simulate(args, jobs, deadline_aware=True)
    fifo = simulate(args, jobs, deadline_aware=False)
    tally = aware.tally
    log(f"timing decisions with {args.deep_queue} jobs queued in one entitlement")
    passes = min(500, args.deep_queue)
    deep = decisions(argparse.Namespace(running=100, queued=args.deep_queue, passes=passes))
    plot_shares(
        args.plot,
        [(at - aware.warmup_s, shares) for at, shares in tally.trace],
        aware.targets,
        f"{args.machines * 8} GPUs, load {args.load:g}: shares under deadline-aware order",
    )
    result = {
        "benchmark": "contention",
        "gpus": args.machines * 8,
        "days": args.days,
        "jobs": len(jobs),
        "load": args.load,
        "utilization": round(tally.busy_gpu_s / (tally.measured_s * aware.capacity_gpus), 4),
        **fairness(aware),
        "deadline_miss_rate": miss_rate(aware, horizon_s),
        "fifo_deadline_miss_rate": miss_rate(fifo, horizon_s),
        **waits(aware, horizon_s),
        "preemptions": tally.preempted_jobs,
        "preempted_tasks": tally.preempted_tasks,
        "preemptions_by_cause": dict(sorted(tally.preempted_by_cause.items())),
        "placement_checks": len(tally.check_ms),
        "refused_by_placement": tally.refused["placement"],
        "refused_by_rule": {
            rule: count for rule, count in sorted(tally.refused.items()) if rule != "placement"
        },
        "over_quota_passes": tally.over_quota + fifo.tally.over_quota,
        "sim_decision_p99_ms": round(float(np.percentile(tally.decide_ms, 99)), 3),
        "placement_check_p99_ms": round(float(np.percentile(tally.check_ms or [0], 99)), 3),
        "admission_decision_p99_ms": round(float(np.percentile(deep, 99)), 3),
        "plot": str(args.plot),
    }
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
