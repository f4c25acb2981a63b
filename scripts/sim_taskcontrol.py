"""Twine's TaskControl evaluation (its Figure 14), reproduced with Tether's real parts.

A sharded service of `--tasks` tasks holds `--shards` shards of `--replicas` replicas each,
every shard's replicas on tasks in different MSBs. The whole job is rolled to a new version
while, part-way, an MSB fails and takes its tasks with it. The real scheduler, allocator and
TaskController registry run in this process against a private etcd, and the reference
controllers (`tether appsched replicas` and `rolling`) decide over real gRPC; only the agents
are simulated: a task runs `--start-s` seconds after it is assigned, unless its machine died.

Prints one JSON line per controller:
- `tasks_acked_first_batch`: operations acknowledged by the first call that had any pending;
- `shards_one_down_peak`, `shards_two_down_peak`: the most shards with exactly one, and with
  two or more, replicas down at once;
- `shards_two_down_outside_failure`: the most shards with two or more replicas down at once
  outside the failure (from the MSB's death until its tasks run again elsewhere); 0 is the
  `replicas` controller's promise;
- `update_duration_s`: from the version change until every task runs the new version.
It also writes a plot of the shards with one and two replicas down over time (`--plot`).

Usage: .venv/bin/python scripts/sim_taskcontrol.py [--tasks 1000] [--shards 15000]
       [--controllers replicas,rolling] [--plot docs/sim_taskcontrol.png]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from benchkit import save_figure, stop_on_signals

from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.model import (
    Allocation,
    Assignment,
    DesiredState,
    Entitlement,
    Job,
    JobSpec,
    Machine,
    MachineState,
    Quota,
    Resources,
    Task,
    TaskState,
    TaskStatus,
    TaskTemplate,
    Topology,
    current_status,
    from_json,
    to_json,
)
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.region.bootstrap import bootstrap_region
from tether.scheduler.service import Scheduler
from tether.scheduler.settings import SchedulerSettings
from tether.store import Put, Store, keys, mod_revision_is, open_store
from tether.store.etcd_server import EtcdServer
from tether.store.mirror import PrefixMirror
from tether.taskcontrol.appsched.replicas import ReplicasController, ShardMap
from tether.taskcontrol.appsched.rolling import MaxUnavailable, RollingController
from tether.taskcontrol.registry.service import Registry
from tether.taskcontrol.registry.settings import RegistrySettings
from tether.taskcontrol.sdk import Controller

ENTITLEMENT: Final = "sim"
JOB: Final = "sharded"
HANDLE: Final = f"{ENTITLEMENT}/{JOB}"
SHARD: Final = "shard-0"
SAMPLE_S: Final = 0.25
TASK_CPU: Final = 1000
MACHINE_CPU: Final = 32_000


def log(message: str) -> None:
    print(f"[sim {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1000, help="tasks of the sharded job")
    parser.add_argument("--shards", type=int, default=15_000, help="shards the tasks hold")
    parser.add_argument("--replicas", type=int, default=3, help="replicas of each shard")
    parser.add_argument("--msbs", type=int, default=20, help="MSBs the machines are spread over")
    parser.add_argument(
        "--fail-tasks", type=int, default=50, help="tasks the failing MSB takes down (about)"
    )
    parser.add_argument(
        "--fail-after",
        type=float,
        default=0.3,
        help="fail the MSB once this share of the tasks runs the new version",
    )
    parser.add_argument(
        "--start-s", type=float, default=2.0, help="seconds a simulated task takes to start"
    )
    parser.add_argument("--max-unavailable", default="10%", help="the rolling controller's limit")
    parser.add_argument(
        "--controllers", default="replicas,rolling", help="which controllers to run, in order"
    )
    parser.add_argument("--timeout-s", type=float, default=600, help="give up a run after this")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--plot", type=Path, default=None, help="write the plot here (PNG)")
    args = parser.parse_args()
    unknown = set(args.controllers.split(",")) - {"replicas", "rolling"}
    if unknown:
        parser.error(f"unknown controller(s): {', '.join(sorted(unknown))}")
    if args.tasks < args.msbs or args.replicas > args.msbs:
        parser.error("need at least as many tasks as MSBs, and more MSBs than replicas")
    MaxUnavailable.parse(args.max_unavailable)  # refuses a malformed limit before any work
    return args


# --- the region -----------------------------------------------------------------------------


def machines(args: argparse.Namespace) -> list[Machine]:
    """Enough machines in every MSB for its share of the tasks, with room to spare for the
    replacements when one MSB fails."""
    per_msb_tasks = -(-args.tasks // args.msbs)
    per_machine = MACHINE_CPU // TASK_CPU
    per_msb = max(2, -(-2 * per_msb_tasks // per_machine))
    return [
        Machine(
            id=f"m{msb:02d}-{n:02d}",
            hostname=f"m{msb:02d}-{n:02d}.sim",
            topology=Topology(region="sim", dc="dc1", msb=f"msb{msb:02d}", rack=f"r{n // 4}"),
            hardware_type="std",
            capacity=Resources(cpu=MACHINE_CPU, memory_mib=MACHINE_CPU * 2),
        )
        for msb in range(args.msbs)
        for n in range(per_msb)
    ]


async def seed(store: Store, args: argparse.Namespace, token_file: Path) -> list[Machine]:
    region = machines(args)
    total = Resources(cpu=MACHINE_CPU * len(region), memory_mib=MACHINE_CPU * 2 * len(region))
    await bootstrap_region(
        store,
        name="sim",
        shards=[SHARD],
        admin_token_file=token_file,
        default_entitlement=Entitlement(name=ENTITLEMENT, quota=Quota(resources=total)),
    )
    for machine in region:
        await store.txn(
            [],
            [
                Put(keys.machine(machine.id), to_json(machine)),
                Put(keys.allocation(machine.id), to_json(Allocation(machine=machine.id))),
            ],
        )
    return region


def job_record(args: argparse.Namespace, version: str, generation: int) -> Job:
    now = datetime.now(UTC)
    spec = JobSpec(
        name=JOB,
        entitlement=ENTITLEMENT,
        count=args.tasks,
        task=TaskTemplate(
            package="shard-server",
            version=version,
            command="serve",
            resources=Resources(cpu=TASK_CPU, memory_mib=TASK_CPU),
        ),
    )
    return Job(spec=spec, generation=generation, created_at=now, updated_at=now)


# --- simulated agents -----------------------------------------------------------------------


class SimulatedAgents:
    """Every machine's agent: an assigned attempt runs `start_s` later, unless its machine has
    died or the attempt was replaced meanwhile."""

    def __init__(self, store: Store, start_s: float) -> None:
        self._store = store
        self._start_s = start_s
        self._assignments = PrefixMirror(store, keys.ASSIGNMENTS, self._changed)
        self._starting: dict[str, asyncio.TimerHandle] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self.dead: set[str] = set()

    async def start(self) -> None:
        await self._assignments.start()
        await self._changed(set(self._assignments.items))

    async def stop(self) -> None:
        for timer in self._starting.values():
            timer.cancel()
        await self._assignments.stop()
        for write in list(self._writes):
            write.cancel()

    async def _changed(self, changed: set[str]) -> None:
        loop = asyncio.get_running_loop()
        for key in changed:
            timer = self._starting.pop(key, None)
            if timer is not None:
                timer.cancel()
            kv = self._assignments.items.get(key)
            machine = key.removeprefix(keys.ASSIGNMENTS).split("/", 1)[0]
            if kv is None or machine in self.dead:
                continue
            assignment = from_json(Assignment, kv.value, stored=True)
            if assignment.desired is DesiredState.RUNNING:
                self._starting[key] = loop.call_later(
                    self._start_s, self._run, key, machine, assignment
                )

    def _run(self, key: str, machine: str, assignment: Assignment) -> None:
        self._starting.pop(key, None)
        if machine in self.dead:
            return
        write = asyncio.create_task(self._report(machine, assignment))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def _report(self, machine: str, assignment: Assignment) -> None:
        now = datetime.now(UTC)
        status = TaskStatus(
            job=assignment.job,
            index=assignment.index,
            machine=machine,
            attempt=assignment.attempt,
            state=TaskState.RUNNING,
            pid=10_000 + assignment.index,
            started_at=now,
            updated_at=now,
        )
        await self._store.put(keys.task_status(ENTITLEMENT, JOB, assignment.index), to_json(status))


# --- observing the job ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Snapshot:
    tasks: dict[int, Task]
    down: set[int]
    """Tasks that do not run their current attempt."""
    updated: int
    """Tasks running the new version."""


async def snapshot(store: Store, version: str) -> Snapshot:
    tasks = {
        task.index: task
        for task in (
            from_json(Task, kv.value, stored=True)
            for kv in (await store.range(keys.tasks_of(ENTITLEMENT, JOB))).kvs
        )
    }
    statuses = {
        status.index: status
        for status in (
            from_json(TaskStatus, kv.value, stored=True)
            for kv in (await store.range(keys.statuses_of(ENTITLEMENT, JOB))).kvs
        )
    }
    down, updated = set(), 0
    for index, task in tasks.items():
        current = current_status(task, statuses.get(index))
        if current is None or current.state is not TaskState.RUNNING:
            down.add(index)
        elif task.version == version:
            updated += 1
    return Snapshot(tasks, down, updated)


def shard_map(
    tasks: dict[int, Task], msb_of: dict[str, str], args: argparse.Namespace
) -> dict[str, list[int]]:
    """Each shard's replicas on tasks in `--replicas` different MSBs, chosen at random."""
    rng = random.Random(args.seed)
    by_msb: defaultdict[str, list[int]] = defaultdict(list)
    for index, task in sorted(tasks.items()):
        assert task.machine is not None
        by_msb[msb_of[task.machine]].append(index)
    msbs = sorted(by_msb)
    return {
        f"shard-{number}": [rng.choice(by_msb[msb]) for msb in rng.sample(msbs, args.replicas)]
        for number in range(args.shards)
    }


def shards_down(holders: dict[int, list[int]], down: Iterable[int]) -> tuple[int, int]:
    """(shards with exactly one replica down, shards with two or more)."""
    counts: defaultdict[int, int] = defaultdict(int)
    for task in down:
        for shard in holders.get(task, ()):
            counts[shard] += 1
    one = sum(1 for count in counts.values() if count == 1)
    return one, len(counts) - one


class Recorded(Controller):
    """Runs another controller's decisions and records each one: (time, pending, acked)."""

    def __init__(self, inner: Controller) -> None:
        super().__init__()
        self.inner = inner
        self.decisions: list[tuple[float, int, int]] = []

    async def decide(self, request: pb.TaskControlRequest) -> list[str]:
        decided = self.inner.decide(request)
        acks = list(await decided if inspect.isawaitable(decided) else decided)
        self.decisions.append((time.monotonic(), len(request.pending_operations), len(acks)))
        return acks


@dataclass(slots=True)
class Run:
    controller: str
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    """(seconds since the update began, shards one down, shards two or more down)."""
    failure: tuple[float, float] | None = None
    first_batch: int = 0
    duration_s: float = 0.0
    failed_tasks: int = 0

    def result(self, args: argparse.Namespace) -> dict[str, Any]:
        start, end = self.failure or (float("inf"), float("inf"))
        outside = [two for at, _, two in self.samples if not start <= at <= end]
        return {
            "benchmark": "taskcontrol",
            "controller": self.controller,
            "tasks": args.tasks,
            "shards": args.shards,
            "replicas": args.replicas,
            "tasks_acked_first_batch": self.first_batch,
            "shards_one_down_peak": max((one for _, one, _ in self.samples), default=0),
            "shards_two_down_peak": max((two for _, _, two in self.samples), default=0),
            "shards_two_down_outside_failure": max(outside, default=0),
            "update_duration_s": round(self.duration_s, 1),
            "failed_tasks": self.failed_tasks,
            "failure_s": round(end - start, 1) if self.failure else None,
            "task_start_s": args.start_s,
        }


# --- one run --------------------------------------------------------------------------------


async def simulate(url: str, tmp: Path, name: str, args: argparse.Namespace) -> Run:
    run = Run(name)
    async with open_store(url) as store:
        region = await seed(store, args, tmp / f"{name}.token")
        token = (tmp / f"{name}.token").read_text().strip()
        msb_of = {machine.id: machine.topology.msb for machine in region}
        agents = SimulatedAgents(store, args.start_s)
        services = [
            Allocator(open_store(url), AllocatorSettings(id=f"{name}-allocator")),
            Registry(open_store(url), RegistrySettings(port=0)),
            Scheduler(open_store(url), SHARD, SchedulerSettings(), identity=f"{name}-scheduler"),
        ]
        await agents.start()
        for service in services:
            await service.start()
        registry = services[1]
        assert isinstance(registry, Registry)
        controller: Recorded | None = None
        try:
            await store.put(keys.job(ENTITLEMENT, JOB), to_json(job_record(args, "1", 1)))
            log(f"{name}: placing and starting {args.tasks} tasks")
            before = await wait_until(store, "1", lambda s: s.updated == args.tasks, args)
            holders: defaultdict[int, list[int]] = defaultdict(list)
            replicas = shard_map(before.tasks, msb_of, args)
            for number, tasks in enumerate(replicas.values()):
                for task in tasks:
                    holders[task].append(number)
            inner: Controller
            if name == "replicas":
                document = json.dumps({"shards": replicas}).encode()
                inner = ReplicasController(ShardMap.parse(document), max_down=1)
            else:
                inner = RollingController(MaxUnavailable.parse(args.max_unavailable))
            controller = Recorded(inner)
            await controller.start(
                "127.0.0.1:0", registry.address, token, job_handle=HANDLE, ttl_s=30
            )
            log(f"{name}: rolling to version 2 through the {name} controller")
            started = time.monotonic()
            await update_version(store, args)
            await observe(store, agents, region, msb_of, holders, run, started, args)
            run.first_batch = next(
                (acked for _, pending, acked in controller.decisions if pending), 0
            )
        finally:
            if controller is not None:
                await controller.stop()
            for service in reversed(services):
                await service.stop()
            await agents.stop()
    return run


async def wait_until(store: Store, version: str, done: Any, args: argparse.Namespace) -> Snapshot:
    deadline = time.monotonic() + args.timeout_s
    while True:
        now = await snapshot(store, version)
        if done(now):
            return now
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(now.down)} tasks still down after {args.timeout_s} s")
        await asyncio.sleep(SAMPLE_S)


async def update_version(store: Store, args: argparse.Namespace) -> None:
    key = keys.job(ENTITLEMENT, JOB)
    kv = await store.get(key)
    assert kv is not None
    job = from_json(Job, kv.value, stored=True)
    spec = job.spec.model_copy(update={"task": job.spec.task.model_copy(update={"version": "2"})})
    updated = job.model_copy(update={"spec": spec, "generation": job.generation + 1})
    result = await store.txn([mod_revision_is(key, kv.mod_revision)], [Put(key, to_json(updated))])
    assert result.succeeded, "nothing else writes the job"


async def observe(
    store: Store,
    agents: SimulatedAgents,
    region: list[Machine],
    msb_of: dict[str, str],
    holders: dict[int, list[int]],
    run: Run,
    started: float,
    args: argparse.Namespace,
) -> None:
    """Samples the shards down until every task runs version 2; fails an MSB part-way."""
    killed: set[int] = set()
    deadline = started + args.timeout_s
    while time.monotonic() < deadline:
        now = await snapshot(store, "2")
        at = time.monotonic() - started
        one, two = shards_down(holders, now.down)
        run.samples.append((at, one, two))
        if not killed and now.updated >= args.fail_after * args.tasks:
            killed = await fail_msb(store, agents, region, msb_of, now, args)
            run.failed_tasks = len(killed)
            run.failure = (at, float("inf"))
            log(f"{run.controller}: at {at:.1f} s an MSB failed with {len(killed)} tasks")
        elif run.failure is not None and run.failure[1] == float("inf") and not killed & now.down:
            run.failure = (run.failure[0], at)
            log(f"{run.controller}: its tasks run again elsewhere at {at:.1f} s")
        if now.updated == args.tasks:
            run.duration_s = at
            log(f"{run.controller}: every task runs version 2 after {at:.1f} s")
            return
        await asyncio.sleep(SAMPLE_S)
    raise TimeoutError(f"the update did not finish in {args.timeout_s} s")


async def fail_msb(
    store: Store,
    agents: SimulatedAgents,
    region: list[Machine],
    msb_of: dict[str, str],
    now: Snapshot,
    args: argparse.Namespace,
) -> set[int]:
    """Kills machines of one MSB until about `--fail-tasks` tasks are gone; returns them."""
    on_machine: defaultdict[str, list[int]] = defaultdict(list)
    for index, task in now.tasks.items():
        if task.machine is not None:
            on_machine[task.machine].append(index)
    msb = msb_of[region[0].id]
    victims: list[Machine] = []
    killed: set[int] = set()
    for machine in region:
        if msb_of[machine.id] == msb and len(killed) < args.fail_tasks:
            victims.append(machine)
            killed.update(on_machine.get(machine.id, ()))
    for machine in victims:
        agents.dead.add(machine.id)
        # What the health checker writes once their heartbeats stop.
        down = machine.model_copy(update={"state": MachineState.DOWN})
        await store.put(keys.machine(machine.id), to_json(down))
    return killed


# --- the plot -------------------------------------------------------------------------------


def plot(path: Path, runs: list[Run]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), squeeze=False)
    for axis, run in zip(axes[:, 0], runs, strict=True):
        times = [at for at, _, _ in run.samples]
        axis.plot(times, [one for _, one, _ in run.samples], label="shards with 1 replica down")
        axis.plot(times, [two for _, _, two in run.samples], label="shards with 2+ replicas down")
        if run.failure is not None:
            end = run.failure[1] if run.failure[1] != float("inf") else times[-1]
            axis.axvspan(run.failure[0], end, color="red", alpha=0.12, label="MSB failure")
        axis.set_title(f"rolling update through the '{run.controller}' controller")
        axis.set_xlabel("seconds since the update began")
        axis.set_ylabel("shards")
        axis.legend(loc="upper right")
    figure.tight_layout()
    save_figure(figure, path)


def main() -> None:
    stop_on_signals()
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    runs = []
    for name in args.controllers.split(","):
        with tempfile.TemporaryDirectory(prefix="tether-sim-") as tmp:
            server = EtcdServer(Path(tmp) / "etcd")
            server.start()
            try:
                run = asyncio.run(simulate(server.url, Path(tmp), name, args))
            finally:
                server.cleanup()
        print(json.dumps(run.result(args)), flush=True)
        runs.append(run)
    if args.plot is not None:
        plot(args.plot, runs)
        log(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
