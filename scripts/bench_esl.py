#!/usr/bin/env python3
"""ESCHER's overheads table on a real region: gang scheduling three ways, and set_resource.

Starts `tether up` (no agents; on `--store` sqlite, the default, or etcd) with `--machines`
simulated machines (`tether agent-sim`, the real agent's code with an executor that starts no
process), each with room for two of the gang's tasks, so a gang of `--gang-size` spans
machines. Then, through the REST API:

- `set_resource_p50_ms`, `set_resource_p99_ms`: `set_resource` end to end (the SDK's call,
  the frontend's validation and store transaction), each call granting the label on one more
  machine, as a gang does; `set_resource_lowering_p50_ms`: a call that lowers a capacity,
  which also asks an allocator what running tasks hold;
- per gang implementation, `lines_of_code` (of the code that makes the gang all or nothing:
  `app_gang` below, written in the application over `set_resource`; the library's
  `tether.esl.gang`; the allocator's built-in gang rule) and the median and p99 latency from
  the first call of the implementation until every task of the gang runs, over `--trials`
  gangs each, the three taking turns.

Prints one JSON line on stdout (with the `store` it ran on); progress goes to stderr.

Usage: .venv/bin/python scripts/bench_esl.py [--store sqlite|etcd] [--machines 300] [--trials 20]
       [--gang-size 8]
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchkit import log, stop_on_signals

# The region harness is test tooling (tests/support), shared with the end-to-end tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.harness import LocalRegion, start_simulated_machines, wait_for
from tether import esl
from tether.allocator import placement
from tether.sdk import TetherClient

MACHINE = {"cpu": 4000, "memory_mib": 8192}
PER_TASK = {"cpu": 2000, "memory_mib": 1024}
"""Two tasks fill a machine's CPU: a gang spans machines."""
ENTITLEMENT = "bench"
POLL_S = 0.01


def app_gang(
    client: TetherClient, entitlement: str, label: str, size: int, per_task: Mapping[str, int]
) -> dict[str, int] | None:
    """Gang scheduling as an application writes it over set_resource alone."""
    slots: dict[str, int] = {}
    for machine in client.list_machines():
        if machine.state != "up" or machine.entitlement not in (None, entitlement):
            continue
        fits = min(
            machine.free.cpu // per_task["cpu"], machine.free.memory_mib // per_task["memory_mib"]
        )
        take = min(fits, size - sum(slots.values()))
        if take > 0:
            slots[machine.id] = take
    if sum(slots.values()) < size:
        return None
    for machine_id, count in slots.items():
        client.set_resource(entitlement, label, count, {"machine": machine_id})
    return {label: 1}


def lines_of(function: Callable[..., Any]) -> int:
    """Lines of a function's code: no signature, docstring, comment or blank line."""
    source = textwrap.dedent(inspect.getsource(function))
    definition = ast.parse(source).body[0]
    assert isinstance(definition, ast.FunctionDef)
    body = definition.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return _code_lines(source, body)


def _code_lines(source: str, statements: Sequence[ast.stmt]) -> int:
    lines = source.splitlines()
    first = statements[0].lineno
    last = max(getattr(node, "end_lineno", node.lineno) or node.lineno for node in statements)
    return sum(
        1 for line in lines[first - 1 : last] if line.strip() and not line.strip().startswith("#")
    )


def builtin_lines() -> int:
    """Lines of the allocator's gang rule: the branches of `Planner.choose` on `gang`."""
    source = inspect.getsource(placement)
    branches = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.If) and "gang" in ast.unparse(node.test)
    ]
    return _code_lines(source, branches)


def job(name: str, size: int, extra: Mapping[str, int], *, gang: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "entitlement": ENTITLEMENT,
        "count": size,
        "task": {
            "package": "sleeper",
            "version": "1",
            "command": "sleep",
            "resources": {**PER_TASK, "extra": dict(extra)},
        },
        "placement": {"gang": gang},
    }


def run_gang(client: TetherClient, way: str, trial: int, size: int) -> float:
    """Seconds from the implementation's first call until every task of the gang runs."""
    name, label = f"{way}-{trial}", f"gang-{way}-{trial}"
    started = time.perf_counter()
    if way == "app":
        extra = app_gang(client, ENTITLEMENT, label, size, PER_TASK)
    elif way == "esl":
        extra = esl.gang(client, ENTITLEMENT, label, size, PER_TASK)
    else:
        extra = {}
    if extra is None:
        raise SystemExit(f"{way}: no room for a gang of {size}")
    handle = client.submit_job(job(name, size, extra, gang=way == "builtin")).handle
    while sum(task.state == "running" for task in client.list_tasks(handle)) < size:
        time.sleep(POLL_S)
    elapsed = time.perf_counter() - started
    client.delete_job(handle)
    wait_for(
        lambda: not any(j.handle == handle for j in client.list_jobs(ENTITLEMENT)),
        timeout_s=60,
        what=f"{handle} deleted",
        interval_s=0.05,
    )
    if extra:
        client.delete_resource(ENTITLEMENT, label)
    return elapsed


def set_resource_latencies(
    client: TetherClient, machines: list[str], calls: int
) -> tuple[list[float], float]:
    """Per call, seconds: granting one more machine a label; then lowering ones (median)."""
    grants = []
    for position in range(calls):
        machine = machines[position % len(machines)]
        label = f"probe-{position // len(machines)}"
        started = time.perf_counter()
        client.set_resource(ENTITLEMENT, label, 2, {"machine": machine})
        grants.append(time.perf_counter() - started)
    lowerings = []
    for machine in machines[: min(20, calls)]:
        started = time.perf_counter()
        client.set_resource(ENTITLEMENT, "probe-0", 1, {"machine": machine})
        lowerings.append(time.perf_counter() - started)
    return grants, statistics.median(lowerings)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


def main() -> None:
    stop_on_signals()
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--store", choices=("sqlite", "etcd"), default="sqlite", help="the region's store (sqlite)"
    )
    parser.add_argument("--machines", type=int, default=300, help="simulated machines")
    parser.add_argument("--trials", type=int, default=20, help="gangs per implementation")
    parser.add_argument("--gang-size", type=int, default=8, help="tasks per gang")
    parser.add_argument("--set-calls", type=int, default=200, help="set_resource calls timed (200)")
    args = parser.parse_args()
    if min(args.machines, args.trials, args.gang_size, args.set_calls) < 1:
        parser.error("--machines, --trials, --gang-size and --set-calls must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-esl-") as directory:
        root = Path(directory)
        store_args = ["--etcd"] if args.store == "etcd" else []
        region = LocalRegion(root / "tether", agents=0, store_args=store_args)
        fleet: subprocess.Popen[bytes] | None = None
        try:
            log("starting the region")
            region.start()
            log(f"starting {args.machines} simulated machines")
            fleet = start_simulated_machines(
                region,
                args.machines,
                root / "agent-sim",
                *("--cpu", str(MACHINE["cpu"]), "--memory-mib", str(MACHINE["memory_mib"])),
            )
            with TetherClient(region.url, region.token, timeout_s=60) as client:
                result = measure(client, args)
        finally:
            if fleet is not None:
                fleet.kill()
                fleet.wait()
            region.cleanup()
    print(json.dumps(result))


def measure(client: TetherClient, args: argparse.Namespace) -> dict[str, Any]:
    machines, trials, size, calls = args.machines, args.trials, args.gang_size, args.set_calls
    client.create_entitlement(
        {
            "name": ENTITLEMENT,
            "quota": {"resources": {key: amount * machines for key, amount in MACHINE.items()}},
            "members": ["admin"],
        }
    )
    ids = sorted(machine.id for machine in client.list_machines())
    log(f"{calls} set_resource calls")
    grants, lowering_s = set_resource_latencies(client, ids, calls)
    for label in {f"probe-{n // len(ids)}" for n in range(calls)}:
        client.delete_resource(ENTITLEMENT, label)
    latencies: dict[str, list[float]] = {"app": [], "esl": [], "builtin": []}
    for trial in range(trials):
        for way, seconds in latencies.items():
            seconds.append(run_gang(client, way, trial, size))
        log(
            f"trial {trial + 1}/{trials}: "
            + ", ".join(f"{way} {1000 * s[-1]:.0f} ms" for way, s in latencies.items())
        )
    lines = {"app": lines_of(app_gang), "esl": lines_of(esl.gang), "builtin": builtin_lines()}
    return {
        "benchmark": "esl",
        "store": args.store,
        "machines": machines,
        "gang_size": size,
        "trials": trials,
        "set_resource_p50_ms": round(1000 * percentile(grants, 0.5), 1),
        "set_resource_p99_ms": round(1000 * percentile(grants, 0.99), 1),
        "set_resource_lowering_p50_ms": round(1000 * lowering_s, 1),
        **{
            way: {
                "lines_of_code": lines[way],
                "median_latency_ms": round(1000 * statistics.median(seconds), 1),
                "p99_latency_ms": round(1000 * percentile(seconds, 0.99), 1),
            }
            for way, seconds in latencies.items()
        },
    }


if __name__ == "__main__":
    main()
