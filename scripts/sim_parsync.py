#!/usr/bin/env python3
"""ParSync, simulated: allocator replicas with indexes of their own, placing jobs on a shared
region while their view of it goes stale in three ways.

--replicas replicas of the allocator's own planner and group-commit functions share --machines
machines of 16 cores; jobs of --teams entitlements (1 to 8 tasks of two shapes, exponential
lifetimes of mean --lifetime-s) arrive at --rate per second, each at a replica in turn. A commit
succeeds only if every machine it touches is as the replica saw it (the store's compares);
otherwise the replica reads those machines at once (--no-read-on-conflict: not) and plans
again, at most 10 times. The same
arrivals run three times, the replicas following the store:

  watch     every change, --watch-delay-s after it was committed (the default allocator);
  oneshot   everything read again every --period-s;
  parsync   one of --partitions partitions read again every --period-s / --partitions
            (the allocator's own `index.parsync`).

Prints one JSON line with, for each mode (here parsync; _watch and _oneshot alike):

  conflict_rate_parsync          conflicts per commit attempt (conflict_rate_watch,
                                 conflict_rate_oneshot)
  mean_staleness_s_parsync       the age of the replica's view of the machine each task went
                                 to, mean (mean_staleness_s_watch, mean_staleness_s_oneshot)
                                 and staleness_sd_s_parsync
  mean_view_age_s_parsync        the age of its view of every machine, when it placed
  fresh_choice_share_parsync     tasks placed where a current view would have put them
                                 (placement quality)
  attempts_per_request_parsync   commit attempts per job (the planning conflicts cost)
  gave_up_parsync, tasks_placed_parsync, tasks_unplaced_parsync

and draws the staleness of each task's machine and the conflict rates (--plot).

Usage: .venv/bin/python scripts/sim_parsync.py [--seconds 120] [--plot docs/sim_parsync.png]
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
from parsync.world import Stats, World, arrivals, summary

MODES = ("watch", "oneshot", "parsync")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--machines", type=int, default=400, help="16-core machines (400)")
    parser.add_argument("--replicas", type=int, default=4, help="allocator replicas (4)")
    parser.add_argument("--teams", type=int, default=16, help="entitlements (16)")
    parser.add_argument("--rate", type=float, default=20.0, help="jobs a second (20)")
    parser.add_argument("--lifetime-s", type=float, default=60.0, help="a task's mean (60)")
    parser.add_argument("--period-s", type=float, default=2.0, help="a full sync (2)")
    parser.add_argument("--partitions", type=int, default=8, help="ParSync's (8)")
    parser.add_argument("--watch-delay-s", type=float, default=0.01, help="(0.01)")
    parser.add_argument("--seconds", type=float, default=120.0, help="simulated (120)")
    parser.add_argument(
        "--read-on-conflict",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read the machines of a conflict at once, as the allocator does (on); off: plan "
        "again on the stale view until the next sync",
    )
    parser.add_argument("--seed", type=int, default=1)
    add_plot_option(parser, "sim_parsync.png")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    stop_on_signals()
    started = time.monotonic()
    jobs = arrivals(
        rate_per_s=args.rate,
        horizon_s=args.seconds,
        teams=args.teams,
        lifetime_s=args.lifetime_s,
        seed=args.seed,
    )
    result: dict[str, object] = {
        "benchmark": "sim-parsync",
        "machines": args.machines,
        "replicas": args.replicas,
        "jobs": len(jobs),
        "period_s": args.period_s,
        "partitions": args.partitions,
        "read_on_conflict": args.read_on_conflict,
    }
    runs: dict[str, Stats] = {}
    for mode in MODES:
        world = World(
            machines=args.machines,
            replicas=args.replicas,
            teams=args.teams,
            mode=mode,
            period_s=args.period_s,
            partitions=args.partitions,
            watch_delay_s=args.watch_delay_s,
            read_on_conflict=args.read_on_conflict,
        )
        runs[mode] = world.run(jobs, args.seconds)
        figures = summary(runs[mode])
        log(f"{mode}: {figures}")
        result |= {f"{name}_{mode}": value for name, value in figures.items()}
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["plot"] = str(args.plot)
    print(json.dumps(result), flush=True)
    plot(runs, args.plot)


def plot(runs: dict[str, Stats], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (ages, conflicts) = plt.subplots(1, 2, figsize=(10, 4))
    for mode in ("oneshot", "parsync"):
        ages.hist(runs[mode].staleness_s, bins=40, alpha=0.6, label=mode)
    ages.set_xlabel("age of the view of the chosen machine (s)")
    ages.set_ylabel("tasks placed")
    ages.legend()
    rates = [runs[mode].conflicts / max(runs[mode].attempts, 1) for mode in MODES]
    conflicts.bar(MODES, rates)
    conflicts.set_ylabel("conflicts per commit attempt")
    figure.suptitle("Replicas syncing by watch, one-shot or ParSync")
    save_figure(figure, path)
    log(f"plot: {path}")


if __name__ == "__main__":
    main()
