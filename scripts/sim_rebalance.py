#!/usr/bin/env python3
"""The rebalancer, simulated: a region left fragmented by churn, before and after rounds of the
rebalancer's own strategies and planner.

--machines machines of 16 cores and 64 GiB over 2 datacenters of 4 MSBs each are shared by
--teams entitlements. Services of 2 to 12 tasks (four shapes, spread over MSBs) arrive until the
region is --use used, the first --packed-share of them while two MSBs drain (they pack into the
others); then --leave-share of the services leave. The allocator's own planner places every
task and answers Suggest; every --period-s a round of the rebalancer proposes moves (the
registry's strategies, its default limits, --max-moves-per-minute); the scheduler's built-in rule
approves them within each job's update policy (10% of its tasks down, at least one) and a moved
task is down --restart-s. It stops after --rounds rounds, or once a round moves nothing and none
is under way. Prints one JSON line:

  stranded_before, stranded_after      free room on machines that run tasks, in machines
  spread_before, spread_after          tasks of jobs beyond their spread's skew
  idle_before, idle_after              machines of entitlements under 25% used
  hot_msbs_before, hot_msbs_after      MSBs' use above the region's mean by more than 15 points
  largest_placeable_before, largest_placeable_after   tasks of half a machine a new job places
  moves_made, moves_by_strategy, rounds, simulated_s, deferred
  unavailability_violations            job-steps with more of a job down than its policy allows
                                       (must be 0)
  most_down                            the most tasks of one job down at once

and draws the measures over the rounds (--plot).

Usage: .venv/bin/python scripts/sim_rebalance.py [--machines 400] [--plot docs/sim_rebalance.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import add_plot_option, log, save_figure, stop_on_signals
from rebalance.world import World

from tether.rebalancer.planner import Limits

STEP_S = 5.0
"""How often approvals are asked for and availability checked (the scheduler asks every 2 s)."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--machines", type=int, default=400, help="machines (400)")
    parser.add_argument("--teams", type=int, default=8, help="entitlements (8)")
    parser.add_argument("--use", type=float, default=0.7, help="how full churn starts (0.7)")
    parser.add_argument("--packed-share", type=float, default=0.3, help="placed while 2 MSBs drain")
    parser.add_argument("--leave-share", type=float, default=0.4, help="services that leave (0.4)")
    parser.add_argument("--period-s", type=float, default=60.0, help="between rounds (60)")
    parser.add_argument("--restart-s", type=float, default=20.0, help="a moved task's downtime")
    parser.add_argument("--max-moves-per-minute", type=int, default=50, help="(50)")
    parser.add_argument("--rounds", type=int, default=120, help="at most (120)")
    parser.add_argument("--seed", type=int, default=1)
    add_plot_option(parser, "sim_rebalance.png")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    stop_on_signals()
    started = time.monotonic()
    world = World(args.machines, dcs=2, msbs=4, teams=args.teams, seed=args.seed)
    world.fill(args.use, args.packed_share)
    world.churn(args.leave_share)
    log(f"{len(world.jobs)} services after churn on {args.machines} machines")
    before = world.measures(0.0)
    largest_before = world.largest_placeable()
    limits = Limits(per_job=1, per_minute=args.max_moves_per_minute)
    history = [before]
    now_s = 0.0
    for _ in range(args.rounds):
        plan = world.round(limits, now_s)
        until = now_s + args.period_s
        while now_s < until:
            world.approve(now_s, args.restart_s)
            world.check(now_s)
            now_s += STEP_S
        history.append(world.measures(now_s))
        log(f"round {world.tally.rounds}: {len(plan.moves)} moves, {world.tally.moves_done} done")
        if not plan.moves and not any(sim.moves for sim in world.jobs.values()):
            break
    after = world.measures(now_s)
    tally = world.tally
    result = {
        "benchmark": "sim-rebalance",
        "machines": args.machines,
        "services": len(world.jobs),
        "seed": args.seed,
        **{f"{name.replace('-', '_')}_before": round(v, 3) for name, v in before.items()},
        **{f"{name.replace('-', '_')}_after": round(v, 3) for name, v in after.items()},
        "largest_placeable_before": largest_before,
        "largest_placeable_after": world.largest_placeable(),
        "moves_made": tally.moves_done,
        "moves_proposed": tally.moves_proposed,
        "moves_by_strategy": dict(tally.by_strategy),
        "rounds": tally.rounds,
        "simulated_s": now_s,
        "deferred": dict(tally.deferred),
        "unavailability_violations": tally.unavailability_violations,
        "most_down": tally.most_down,
        "wall_s": round(time.monotonic() - started, 1),
        "plot": str(args.plot),
    }
    print(json.dumps(result), flush=True)
    plot(history, args.period_s, args.plot)


def plot(history: list[dict[str, float]], period_s: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5))
    minutes = [n * period_s / 60 for n in range(len(history))]
    for name in history[0]:
        axis.plot(minutes, [h[name] for h in history], label=name)
    axis.set_xlabel("simulated minutes")
    axis.set_ylabel("measure (lower is better)")
    axis.set_title("The rebalancer on a churned region")
    axis.legend()
    save_figure(figure, path)
    log(f"plot: {path}")


if __name__ == "__main__":
    main()
