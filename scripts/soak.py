#!/usr/bin/env python3
"""A soak under faults: the region keeps what it accepted and runs nothing twice that must not.

Starts a region (`tether up` with restarts on) on a 3-member etcd cluster: three agents, and a
fourth in a network namespace whose link can be cut. Two long-running jobs (one ordinary, one
at-most-once) and `--clients` REST clients that submit, scale, update and delete jobs (every
other one at-most-once; submissions with an Idempotency-Key; a call that gets no answer or a 503
is sent again, to the other frontend) run for `--minutes`, while a fault injector, one fault at
a time, every kind in each round: kill -9s a process of each kind of service (frontend,
scheduler, allocator, broker, health, registry, agent; `tether up` restarts it), SIGSTOPs an
etcd member and resumes it, kills an etcd member and starts it again, and cuts the namespaced
agent off for long enough that its machine goes down. A sampler reads /proc ten times a second.

Then it settles (every accepted job runs as accepted, deleted ones are gone, every machine up,
no stray process) and audits. Prints one JSON line; the targets are 0 for `accepted_jobs_lost`,
`tasks_twice_at_most_once` (an at-most-once task seen as two processes at one sample),
`overcommitted_machines`, `orphan_keys` (records of a deleted job or task, left behind),
`stray_processes` and `errors_5xx_outside_store_faults` (a 503 while an etcd member is faulty
is allowed); `tasks_twice_other_s` (seconds ordinary tasks ran twice, during the partition) and
`task_restarts_from_control_plane_faults` (new attempts of the long-running jobs' tasks, besides
the moves off the cut-off machine) are reported. Progress goes to stderr.

Needs root (network namespaces) and etcd (scripts/test and scripts/up install it).

Usage: .venv/bin/python scripts/soak.py --minutes 30 [--rounds N] [--clients 3] [--seed 0]
                                        [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

# The soak's machinery is test tooling (tests/support), shared with the suite's short run.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchkit import stop_on_signals

from tests.support.soak.injector import FaultTimings
from tests.support.soak.run import Soak, SoakOptions


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="how long faults and churn go on"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="stop sooner, once every kind of fault has been injected this many times",
    )
    parser.add_argument("--clients", type=int, default=3, help="REST clients churning jobs")
    parser.add_argument("--seed", type=int, default=0, help="the fault injector's random seed")
    parser.add_argument(
        "--partition-s", type=float, default=FaultTimings.partition_s, help="how long a cut lasts"
    )
    parser.add_argument(
        "--dir", type=Path, help="where the region lives (default: a new temporary directory)"
    )
    args = parser.parse_args()
    if args.minutes <= 0 or args.clients < 1 or (args.rounds is not None and args.rounds < 1):
        parser.error("--minutes must be positive, --clients and --rounds at least 1")
    if os.geteuid() != 0:
        parser.error("run it as root: it cuts an agent off in a network namespace (ip netns)")
    directory = args.dir or Path(tempfile.mkdtemp(prefix="tether-soak-"))
    began = time.monotonic()

    def progress(line: str) -> None:
        elapsed = time.monotonic() - began
        print(f"[{time.strftime('%H:%M:%S')} {elapsed:7.1f} s] {line}", file=sys.stderr, flush=True)

    options = SoakOptions(
        minutes=args.minutes,
        rounds=args.rounds,
        clients=args.clients,
        seed=args.seed,
        timings=FaultTimings(partition_s=args.partition_s),
    )
    # Ctrl-C or `kill` still removes the region, the etcd cluster and the namespace.
    stop_on_signals()
    progress(f"region in {directory}")
    with Soak(directory, options, progress) as soak:
        report = soak.run()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
