#!/usr/bin/env python3
"""Writes seeded capacity traces of harvest machines, one file per machine, for
`tether agent --harvest-trace FILE` or `tether agent-sim --harvest-traces DIR`.

The machines are those `tether agent-sim --machines N --id-prefix P` runs (the same ids); the
first --harvest-share of them get a trace, `<machine id>.jsonl` in --out, from
scripts/harvest/traces.py: about 70% of the intervals between CPU changes 10 minutes or more,
a share of at least --min-share of the cores, evictions at --evictions-per-hour with a 30 s
notice (a trace ends with its eviction). Prints one JSON line:

  harvest_machines        machines given a trace (the files written)
  steps                   changes over all traces
  evictions               traces that end with an eviction notice
  long_interval_share     intervals between changes of 10 minutes or more
  out                     the directory written

Usage: .venv/bin/python scripts/harvest_traces.py --machines 1000 --out traces/
       tether agent-sim --machines 1000 --harvest-traces traces/
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchkit import log
from harvest.traces import TraceShape, trace

from tether.agent.simulated import simulated_machines
from tether.model import Resources
from tether.region.plan import DATACENTERS, HARDWARE_TYPE, MSBS_PER_DC


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--machines", type=int, required=True, help="agent-sim's --machines")
    parser.add_argument("--id-prefix", default="sim", help="agent-sim's --id-prefix (sim)")
    parser.add_argument("--harvest-share", type=float, default=0.5, help="machines traced (0.5)")
    parser.add_argument("--cpu", type=int, default=32_000, help="agent-sim's --cpu (32000)")
    parser.add_argument(
        "--memory-mib", type=int, default=131_072, help="agent-sim's --memory-mib (131072)"
    )
    parser.add_argument("--hours", type=float, default=24.0, help="trace length (24)")
    parser.add_argument("--min-share", type=float, default=0.25, help="least CPU share (0.25)")
    parser.add_argument("--evictions-per-hour", type=float, default=0.01, help="per machine (0.01)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="directory to write")
    args = parser.parse_args()
    if args.machines < 1 or not 0 <= args.harvest_share <= 1 or not 0 < args.min_share <= 1:
        parser.error("--machines must be positive, --harvest-share and --min-share in [0, 1]")
    return args


def main() -> None:
    args = parse_args()
    capacity = Resources(cpu=args.cpu, memory_mib=args.memory_mib)
    machines = simulated_machines(
        args.machines,
        region="local",
        datacenters=list(DATACENTERS),
        msbs_per_dc=MSBS_PER_DC,
        rack_size=40,
        hardware_type=HARDWARE_TYPE,
        capacity=capacity,
        prefix=args.id_prefix,
    )
    traced = machines[: int(len(machines) * args.harvest_share)]
    shape = TraceShape(min_share=args.min_share, evictions_per_hour=args.evictions_per_hour)
    rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    steps = evictions = long = 0
    for machine in traced:
        lines, last = [], 0.0
        for step in trace(capacity, args.hours * 3600, shape, rng):
            lines.append(step.model_dump_json(exclude_none=True))
            long += step.at_s - last >= 600
            last = step.at_s
            evictions += step.evict_in_s is not None
        steps += len(lines)
        (args.out / f"{machine.id}.jsonl").write_text("".join(f"{line}\n" for line in lines))
    log(f"{len(traced):,} traces of {args.hours:g} h written to {args.out}")
    print(
        json.dumps(
            {
                "harvest_machines": len(traced),
                "steps": steps,
                "evictions": evictions,
                "long_interval_share": round(long / steps, 3) if steps else None,
                "out": str(args.out),
            }
        )
    )


if __name__ == "__main__":
    main()
