"""End-to-end timings of a real local region (`tether up`): start, run, restart, fail over.

Prints one JSON line. Every number is wall-clock seconds measured from outside, through the
REST API, with real task processes:

- `ready_s`: `tether up` until it reports the region ready;
- `job_running_s`: submitting a job of `--tasks` tasks until every task runs;
- `task_restart_s`: `kill -9` of a task process until it runs again (backoff 0.5 s included);
- `leader_failover_s`: `kill -9` of a shard's scheduler leader until its standby holds the lease;
- `machine_down_s`: `kill -9` of an agent until its machine is marked down;
- `tasks_moved_s`: the same kill until all the job's tasks run again off that machine.

Usage: .venv/bin/python scripts/bench_region.py [--etcd] [--tasks 40] [--agents 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from tether.model import ShardLeader, from_json, shard_for
from tether.region.harness import (
    FAST_TIMINGS,
    LocalRegion,
    all_running,
    get_json,
    sleeper_job,
    tasks_of,
    wait_for,
)
from tether.region.plan import SHARDS
from tether.store import keys, open_store


def leader_pid(store_url: str, shard: str) -> int | None:
    async def read() -> int | None:
        async with open_store(store_url) as store:
            kv = await store.get(keys.shard_leader(shard))
            return None if kv is None else from_json(ShardLeader, kv.value, stored=True).pid

    return asyncio.run(read())


def measure(region: LocalRegion, tasks: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    started = time.monotonic()
    region.start()
    results["ready_s"] = round(time.monotonic() - started, 2)
    store_url = str(json.loads((region.state_dir / "region.json").read_text())["store"])
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

        shard = shard_for("default", list(SHARDS))
        old = leader_pid(store_url, shard)
        assert old is not None
        started = time.monotonic()
        os.kill(old, signal.SIGKILL)
        wait_for(
            lambda: (pid := leader_pid(store_url, shard)) is not None and pid != old,
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
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--etcd", action="store_true", help="run the region on a local etcd")
    parser.add_argument("--tasks", type=int, default=40, help="tasks of the measured job")
    parser.add_argument("--agents", type=int, default=4, help="local agents (machines)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as directory:
        region = LocalRegion(
            Path(directory) / "tether",
            store_args=["--etcd"] if args.etcd else [],
            agents=args.agents,
        )
        try:
            results = measure(region, args.tasks)
        finally:
            region.cleanup()
    print(
        json.dumps(
            {
                "benchmark": "region",
                "store": "etcd" if args.etcd else "sqlite",
                "agents": args.agents,
                "tasks": args.tasks,
                "timings": FAST_TIMINGS,
                **results,
            }
        )
    )


if __name__ == "__main__":
    main()
