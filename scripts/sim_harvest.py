#!/usr/bin/env python3
"""Harvest machines, simulated: serverless-like services on a region whose harvest machines
shrink and are evicted as seeded capacity traces say.

The allocator's own index and planner place every instance, with the placement rules of the
real region (`placement.harvest`, Min-Worker-Set, spread), and the broker's own choice
(`broker.harvest.displaced`) names the instances a shrink moves; a simulated clock drives them.
--machines machines of 16 cores, --harvest-share of them harvest machines replaying traces from
scripts/harvest/traces.py (about 70% of the intervals between changes 10 minutes or more, a
share of at least --min-share, evictions at --evictions-per-hour with a 30 s notice).
--services services receive Poisson invocations (one core each, exponential durations of mean
--duration-s) at --load times the region's mean usable cores.

The same arrivals and traces run four times: Min-Worker-Set placement or the default spread,
with notices (a displaced instance that does not end within --notice-s moves then, starting
again elsewhere from the beginning; an evicted machine's at its deadline) or without (killed at
once). Prints one JSON line:

  success_rate_mws, success_rate_spread    invocations that ran to their end, with notices
  success_rate_mws_no_notice, success_rate_spread_no_notice    the same without notices
  cold_starts_mws, cold_starts_spread      starts on a machine where the service ran no
                                           instance within --keep-alive-s
  moved_mws, moved_spread                  instances moved off a machine within their notice
  killed_mws, killed_spread, killed_mws_no_notice    instances killed (without notice, or
                                           with nowhere to go)
  rejected_mws, rejected_spread            invocations refused on arrival (no room anywhere)
  shrinks, evictions                       notices the traces caused (with notices, MWS)

and draws the success rates and cold starts (--plot). Target: success_rate_mws >= 0.9999.

Usage: .venv/bin/python scripts/sim_harvest.py [--hours 1] [--plot docs/sim_harvest.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchkit import add_plot_option, log, stop_on_signals
from harvest.traces import TraceShape
from harvest.world import CORES, Tally, World

HOUR_S = 3600.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--machines", type=int, default=64, help="16-core machines (64)")
    parser.add_argument("--harvest-share", type=float, default=0.5, help="harvest machines (0.5)")
    parser.add_argument("--min-share", type=float, default=0.25, help="least harvest share (0.25)")
    parser.add_argument(
        "--evictions-per-hour", type=float, default=0.05, help="per harvest machine (0.05)"
    )
    parser.add_argument("--services", type=int, default=16, help="services (16)")
    parser.add_argument("--load", type=float, default=0.6, help="of the mean usable cores (0.6)")
    parser.add_argument("--duration-s", type=float, default=20.0, help="mean invocation (20)")
    parser.add_argument("--notice-s", type=float, default=30.0, help="a shrink's notice (30)")
    parser.add_argument("--keep-alive-s", type=float, default=60.0, help="warm instances (60)")
    parser.add_argument("--hours", type=float, default=1.0, help="simulated hours (1)")
    parser.add_argument("--seed", type=int, default=1)
    add_plot_option(parser, "sim_harvest.png")
    return parser.parse_args()


def arrivals(args: argparse.Namespace, cores: float) -> list[tuple[float, int, float]]:
    """(time, service, duration) of every invocation, in time order: each service a Poisson
    process, services' rates spread by a Zipf-like weight (a few busy, many quiet)."""
    rng = np.random.default_rng(args.seed + 1)
    horizon_s = args.hours * HOUR_S
    weights = 1 / np.arange(1, args.services + 1)
    rates = args.load * cores / args.duration_s * weights / weights.sum()
    found: list[tuple[float, int, float]] = []
    for service, rate in enumerate(rates):
        at = 0.0
        while (at := at + rng.exponential(1 / rate)) < horizon_s:
            found.append((at, service, float(rng.exponential(args.duration_s))))
    found.sort()
    return found


def simulate(
    args: argparse.Namespace,
    invocations: list[tuple[float, int, float]],
    *,
    min_worker_set: bool,
    notices: bool,
) -> Tally:
    world = World(
        machines=args.machines,
        harvest_share=args.harvest_share,
        services=args.services,
        shape=TraceShape(min_share=args.min_share, evictions_per_hour=args.evictions_per_hour),
        horizon_s=args.hours * HOUR_S,
        min_worker_set=min_worker_set,
        notices=notices,
        notice_s=args.notice_s,
        keep_alive_s=args.keep_alive_s,
        seed=args.seed,
    )
    started = time.monotonic()
    tally = world.run(invocations)
    placement = "MWS" if min_worker_set else "spread"
    log(
        f"{placement}, {'with' if notices else 'without'} notices: {tally.invocations:,} "
        f"invocations in {time.monotonic() - started:.0f} s"
    )
    return tally


def rate(tally: Tally) -> float:
    return round(tally.succeeded / tally.invocations, 6) if tally.invocations else 1.0


def plot(path: Path, runs: dict[str, Tally]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    names = list(runs)
    failed = left.bar(names, [tally.invocations - tally.succeeded for tally in runs.values()])
    left.bar_label(failed)
    left.set_ylabel("failed invocations")
    cold = right.bar(names, [tally.cold_starts for tally in runs.values()])
    right.bar_label(cold)
    right.set_ylabel("cold starts")
    for axis in (left, right):
        axis.tick_params(axis="x", rotation=20)
    figure.suptitle("Services on harvest machines: Min-Worker-Set against spread")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)


def main() -> None:
    stop_on_signals()
    args = parse_args()
    harvest_machines = int(args.machines * args.harvest_share)
    mean_share = args.min_share + (1 - args.min_share) / 2
    cores = CORES * (args.machines - harvest_machines + harvest_machines * mean_share)
    invocations = arrivals(args, cores)
    log(f"{len(invocations):,} invocations over {args.hours:g} h on {args.machines} machines")
    runs = {
        f"{placement}{'' if notices else ' no notice'}": simulate(
            args, invocations, min_worker_set=placement == "MWS", notices=notices
        )
        for notices in (True, False)
        for placement in ("MWS", "spread")
    }
    mws, spread = runs["MWS"], runs["spread"]
    mws_bare, spread_bare = runs["MWS no notice"], runs["spread no notice"]
    plot(args.plot, runs)
    result = {
        "benchmark": "harvest",
        "machines": args.machines,
        "harvest_machines": harvest_machines,
        "hours": args.hours,
        "invocations": mws.invocations,
        "success_rate_mws": rate(mws),
        "success_rate_spread": rate(spread),
        "success_rate_mws_no_notice": rate(mws_bare),
        "success_rate_spread_no_notice": rate(spread_bare),
        "cold_starts_mws": mws.cold_starts,
        "cold_starts_spread": spread.cold_starts,
        "moved_mws": mws.moved,
        "moved_spread": spread.moved,
        "killed_mws": mws.killed,
        "killed_spread": spread.killed,
        "killed_mws_no_notice": mws_bare.killed,
        "rejected_mws": mws.rejected,
        "rejected_spread": spread.rejected,
        "shrinks": mws.notices["harvest-shrink"],
        "evictions": mws.notices["eviction"],
        "plot": str(args.plot),
    }
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
