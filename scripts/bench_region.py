#!/usr/bin/env python3
"""A whole region on this machine: end-to-end timings (default), or tasks started at scale.

Timings (default): starts a real region with `tether up` (short leases: agent 2 s, health grace
2 s, scheduler 3 s) and times it from outside, through the REST API, with real task processes:

- `ready_s`: `tether up` until it reports the region ready;
- `job_running_s`: submitting a job of `--tasks` tasks until every task runs;
- `task_restart_s`: `kill -9` of a task process until it runs again (backoff 0.5 s included);
- `leader_failover_s`: `kill -9` of a shard's scheduler leader until its standby holds the lease;
- `machine_down_s`: `kill -9` of an agent until its machine is marked down;
- `tasks_moved_s`: the same kill until all the job's tasks run again off that machine.

Scale (`--machines N`): the same services (`tether up --agents 0 --shards 4 --frontends 2`,
with the services' default timings but 30 s leases for schedulers and allocators and a 60 s
health grace, which survive seconds without CPU, and a 120 s fencing period that the simulated
machines hold as their lease), and N simulated machines in one more process
(`tether agent-sim`: the real agent's code with an executor that starts no process). Once every
machine is up, it creates 2 entitlements per shard and submits jobs of `--job-tasks` tasks
totalling `--tasks` through REST (16 requests in flight, over both frontends; with
`--max-pending N`, none while over N submitted tasks do not run yet), and follows the task
statuses in the store until every task runs:

- `machines_up_s`: from starting the simulated machines until all are up;
- `submit_s`: submitting every job;
- `submit_to_all_running_s`: from the first submission until every task runs;
- `tasks_running_per_s`: `--tasks` over that time;
- `store_revisions_per_s`: store transactions committed per second meanwhile;
- `cpu_ms_per_task`: CPU milliseconds per task meanwhile, summed over every process (from `/proc`);
- `peak_rss_mib` and `cpu_s` (CPU seconds during the submission and start) per process.

It gives up at `--timeout-s`, or once the machine's available memory falls below
`--min-available-mib` (`gave_up` says which; the rest says how far it got).

Prints one JSON line on stdout; progress goes to stderr.

Usage: .venv/bin/python scripts/bench_region.py [--store etcd] [--tasks 40] [--agents 4]
       .venv/bin/python scripts/bench_region.py --machines 10000 --tasks 100000 --store etcd
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from benchkit import RESULTS_DIR, log, memory_below, profiled, stop_on_signals
from benchkit.scale import (
    TASK_RESOURCES,
    Running,
    create_entitlements,
    submit,
    wait_for_machines,
)

# The region harness is test tooling (tests/support), shared with the end-to-end tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.harness import (
    FAST_TIMINGS,
    LocalRegion,
    all_running,
    cpu_seconds,
    get_json,
    peak_rss_mib,
    sleeper_job,
    tasks_of,
    wait_for,
)
from tether.aio import first_of
from tether.store import open_store
from tether.tls import client_context

SCALE_SHARDS = 4
SCALE_FRONTENDS = 2
ENTITLEMENTS_PER_SHARD = 2
# Leases long enough to outlast a process starved of CPU for seconds (some 20 processes share
# two cores at full load): a lapsed lease costs a leader election and a full re-listing.
SCALE_TIMINGS = {
    "TETHER_SCHEDULER_LEASE_TTL_S": "30",
    "TETHER_ALLOCATOR_LEASE_TTL_S": "30",
    "TETHER_HEALTH_GRACE_S": "60",
}
SCALE_FENCING_S = 120.0
"""The region's fencing period, and so the simulated machines' lease (`tether agent-sim` holds
the longest the region allows): a lapse costs every machine a new registration at once."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--store", choices=("sqlite", "etcd"), default="sqlite", help="the region's store"
    )
    parser.add_argument("--etcd", action="store_true", help="the same as --store etcd")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="tether up --tls: every hop over TLS, mutual TLS between services (and to etcd)",
    )
    parser.add_argument("--tasks", type=int, default=40, help="tasks of the job(s) submitted")
    parser.add_argument("--agents", type=int, default=4, help="timings: real local agents")
    parser.add_argument(
        "--machines", type=int, default=0, help="scale: this many simulated machines"
    )
    parser.add_argument("--job-tasks", type=int, default=100, help="scale: tasks per job")
    parser.add_argument(
        "--max-pending",
        type=int,
        metavar="TASKS",
        help="scale: submit no job while more than this many submitted tasks do not run yet "
        "(a client that paces itself; default: submit everything at once)",
    )
    parser.add_argument(
        "--min-available-mib",
        type=float,
        default=1024,
        metavar="MIB",
        help="scale: give up once the machine's available memory falls below this, before the "
        "kernel kills a process (the JSON says how far it got)",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=900,
        help="scale: give up waiting for every task to run after this (the JSON says how far "
        "it got)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="scale: record a py-spy flame graph of every service process while the tasks "
        "start, as DIR/<process>.svg (root, or ptrace allowed)",
    )
    args = parser.parse_args()
    if args.max_pending is not None and args.max_pending < args.job_tasks:
        parser.error(
            f"--max-pending must be at least --job-tasks ({args.job_tasks}): a job "
            "is submitted whole"
        )
    if args.etcd:
        args.store = "etcd"
    return args


# --- timings ----------------------------------------------------------------------------------


def measure_timings(region: LocalRegion, tasks: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    started = time.monotonic()
    region.start()
    results["ready_s"] = round(time.monotonic() - started, 2)
    handle = "default/bench"
    with region.client() as client:
        started = time.monotonic()
        response = client.post("/v1/jobs", json=sleeper_job("bench", tasks))
        response.raise_for_status()
        wait_for(lambda: all_running(client, handle, tasks), timeout_s=300, what="all running")
        results["job_running_s"] = round(time.monotonic() - started, 2)

        victim = tasks_of(client, handle)[0]
        started = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        wait_for(
            lambda: any(
                t["index"] == victim["index"]
                and t["state"] == "running"
                and t["pid"] != victim["pid"]
                for t in tasks_of(client, handle)
            ),
            timeout_s=60,
            what="the task to run again",
            interval_s=0.05,
        )
        results["task_restart_s"] = round(time.monotonic() - started, 2)

        shard = region.shard_of("default")
        old = region.shard_leader(shard)
        assert old is not None
        started = time.monotonic()
        os.kill(old.pid, signal.SIGKILL)
        wait_for(
            lambda: (leader := region.shard_leader(shard)) is not None and leader.pid != old.pid,
            timeout_s=60,
            what="a new leader",
            interval_s=0.05,
        )
        results["leader_failover_s"] = round(time.monotonic() - started, 2)

        machine = tasks_of(client, handle)[0]["machine"]
        started = time.monotonic()
        os.kill(region.service_pids()[f"agent-{machine}"], signal.SIGKILL)
        wait_for(
            lambda: any(
                m["id"] == machine and m["state"] == "down"
                for m in get_json(client, "/v1/machines")["machines"]
            ),
            timeout_s=60,
            what="the machine to be down",
            interval_s=0.05,
        )
        results["machine_down_s"] = round(time.monotonic() - started, 2)
        wait_for(
            lambda: (
                (running := all_running(client, handle, tasks)) is not None
                and all(t["machine"] != machine for t in running)
            ),
            timeout_s=120,
            what="the tasks to move",
        )
        results["tasks_moved_s"] = round(time.monotonic() - started, 2)
    return {"agents": region.agents, "timings": FAST_TIMINGS, **results}


# --- scale ------------------------------------------------------------------------------------


async def run_scale(
    region: LocalRegion, args: argparse.Namespace, pids: dict[str, int]
) -> dict[str, Any]:
    """Submits the jobs and waits until every task runs; returns the measurements."""
    headers = {"Authorization": f"Bearer {region.token}"}
    verify = client_context(region.ca_file)
    frontends = [
        httpx.AsyncClient(base_url=url, headers=headers, timeout=120, verify=verify)
        for url in region.urls
    ]
    entitlements = [f"team-{n:02d}" for n in range(SCALE_SHARDS * ENTITLEMENTS_PER_SHARD)]
    counts = [args.job_tasks] * (args.tasks // args.job_tasks)
    if args.tasks % args.job_tasks:
        counts.append(args.tasks % args.job_tasks)
    jobs = []
    for number, count in enumerate(counts):
        job = sleeper_job(
            f"job-{number:05d}", count, entitlement=entitlements[number % len(entitlements)]
        )
        job["task"]["resources"] = TASK_RESOURCES
        jobs.append(job)
    try:
        tasks = Counter({name: 0 for name in entitlements})
        for job in jobs:
            tasks[job["entitlement"]] += job["count"]
        await create_entitlements(frontends[0], tasks)
        shards = (await frontends[0].get("/admin/shards")).json()["shards"]
        spread = {
            shard["shard"]: len(set(shard["entitlements"]) & set(entitlements)) for shard in shards
        }
        log(f"entitlements per shard: {spread}")
        async with open_store(settings=region.store_settings()) as store:
            running = Running()
            first_revision = await store.revision()
            follower = asyncio.create_task(running.follow(store, first_revision + 1))
            python = {name: pid for name, pid in pids.items() if name != "etcd"}
            with profiled(python, args.profile):
                cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                started = time.monotonic()
                submitted: dict[str, Any] = {"submit_s": None, "retried": 0}

                async def submit_and_wait() -> None:
                    log(f"submitting {len(jobs):,} jobs of {args.job_tasks} tasks")
                    submitted["retried"] = await submit(frontends, jobs, running, args.max_pending)
                    submitted["submit_s"] = round(time.monotonic() - started, 1)
                    log(f"submitted in {submitted['submit_s']} s; {len(running.tasks):,} run")
                    await running.wait_for(args.tasks, started + args.timeout_s)

                reporter = asyncio.create_task(running.report(started))
                finished = await first_of(submit_and_wait(), memory_below(args.min_available_mib))
                out_of_memory = finished == 1
                reporter.cancel()
                elapsed = time.monotonic() - started
            revisions = await store.revision() - first_revision
            cpu = {
                name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()
            }
            follower.cancel()
    finally:
        for http in frontends:
            await http.aclose()
    completed = len(running.tasks) >= args.tasks
    gave_up = None if completed else "memory" if out_of_memory else "timeout"
    log(
        f"{len(running.tasks):,} tasks run after {elapsed:.1f} s"
        + ("" if gave_up is None else f" (gave up: {gave_up})")
    )
    return {
        "jobs": len(jobs),
        "completed": completed,
        "gave_up": gave_up,
        "tasks_running": len(running.tasks),
        "submit_s": submitted["submit_s"],
        "submissions_retried": submitted["retried"],
        "max_pending": args.max_pending,
        "submit_to_all_running_s": round(elapsed, 1) if completed else None,
        "tasks_running_per_s": round(len(running.tasks) / elapsed),
        "store_revisions_per_s": round(revisions / elapsed),
        "cpu_ms_per_task": round(1000 * sum(cpu.values()) / max(len(running.tasks), 1), 2),
        "entitlements_per_shard": spread,
        "cpu_s": cpu,
    }


def measure_scale(region: LocalRegion, args: argparse.Namespace) -> dict[str, Any]:
    region.start(timeout_s=300)
    store_url = region.store_url()
    state = region.state()
    log_path = region.state_dir / "logs" / "agent-sim.log"
    with log_path.open("ab") as sim_log:
        simulator = subprocess.Popen(
            [
                *(sys.executable, "-m", "tether.cli.main", "agent-sim"),
                *("--machines", str(args.machines), "--store", store_url),
                *("--work-dir", str(region.state_dir / "agent-sim")),
            ],
            stdout=sim_log,
            stderr=subprocess.STDOUT,
            env={**region.env(), **region.options().process_env("agent")},
            start_new_session=True,
        )
    try:
        started = time.monotonic()
        log(f"starting {args.machines:,} simulated machines (log: {log_path})")
        asyncio.run(
            wait_for_machines(
                region.store_settings(), args.machines, simulator, args.min_available_mib
            )
        )
        up_s = time.monotonic() - started
        log(f"{args.machines:,} machines up after {up_s:.1f} s")
        pids = {**region.service_pids(), "agent-sim": simulator.pid}
        if state.etcd_pid:
            pids["etcd"] = state.etcd_pid
        results = asyncio.run(run_scale(region, args, pids))
        rss = {
            name: round(mib) for name, pid in pids.items() if (mib := peak_rss_mib(pid)) is not None
        }
    finally:
        simulator.kill()
        simulator.wait()
    return {
        "machines": args.machines,
        "shards": SCALE_SHARDS,
        "frontends": SCALE_FRONTENDS,
        "timings": SCALE_TIMINGS,
        "machines_up_s": round(up_s, 1),
        **results,
        "peak_rss_mib": rss,
    }


def keep_logs(logs: Path) -> None:
    """Copies a failed run's region logs out of its temporary directory, which is removed."""
    kept = RESULTS_DIR / f"bench_region-logs-{time.strftime('%Y%m%d-%H%M%S')}"
    shutil.copytree(logs, kept, dirs_exist_ok=True)
    log(f"the run failed; the region's logs are kept in {kept}")


def main() -> None:
    stop_on_signals()
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as directory:
        store_args = ["--etcd"] if args.store == "etcd" else []
        if args.machines:
            region = LocalRegion(
                Path(directory) / "tether",
                store_args=store_args,
                agents=0,
                frontends=SCALE_FRONTENDS,
                shards=SCALE_SHARDS,
                timings=SCALE_TIMINGS,
                fencing_s=SCALE_FENCING_S,
                tls=args.tls,
            )
        else:
            region = LocalRegion(
                Path(directory) / "tether", store_args=store_args, agents=args.agents, tls=args.tls
            )
        try:
            results = (
                measure_scale(region, args)
                if args.machines
                else measure_timings(region, args.tasks)
            )
        except (Exception, SystemExit) as failed:
            # A signal's SystemExit carries an int: a stop asked for, not a failure.
            if not (isinstance(failed, SystemExit) and isinstance(failed.code, int)):
                keep_logs(region.state_dir / "logs")
            raise
        finally:
            region.cleanup()
    benchmark = "region-scale" if args.machines else "region"
    print(
        json.dumps(
            {
                "benchmark": benchmark,
                "store": args.store,
                "tls": args.tls,
                "tasks": args.tasks,
                **results,
            }
        )
    )


if __name__ == "__main__":
    main()
