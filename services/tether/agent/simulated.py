"""Simulated machines: an executor that runs no process, and many real agents in one process."""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from tether.agent.assignments import SharedTemplates
from tether.agent.executor import Executor, Leftover
from tether.agent.fanout import FleetStore, SharedWatches
from tether.agent.service import Agent
from tether.agent.settings import AgentSettings
from tether.agent.shim import fence_verdict
from tether.agent.workdir import AttemptFiles, ShimExit, ShimState, TaskRef
from tether.aio import cancel_and_wait
from tether.model import (
    GPU_TYPE_ATTRIBUTE,
    AcceleratorSpec,
    Assignment,
    Machine,
    Resources,
    Topology,
)
from tether.model.accelerator import ProfileError, ThroughputProfile
from tether.model.machine import HarvestStep
from tether.service import RegionError, Service, read_region
from tether.store import Store, StoreError, keys

_log = logging.getLogger(__name__)

SIMULATED_PID_BASE: Final = 1 << 22
"""Made-up pids start at the kernel's largest pid_max, so they never name a real process."""
LIMITS: Final = "simulated"
"""What a simulated attempt reports as its limit mode."""
STARTING_AT_ONCE: Final = 64
"""Agents of a fleet that register at the same time: enough to keep the store busy."""
POLL_INTERVAL_S: Final = 60.0
"""The executor wakes its agent on every change: a poll only retries what failed, and
thousands of agents polling often would take the fleet's CPU."""
TRAINING_POLL_S: Final = 5.0
"""How often an agent whose executor trains looks at its attempts (and reports their steps)."""
RETRY_S: Final = 1.0
"""Pause before an agent the store refused tries to start again."""

_pids = itertools.count(SIMULATED_PID_BASE)


Speed = Callable[[AcceleratorSpec], float | None]
"""Steps per second a gang makes on this machine's accelerators (None: it cannot run here)."""


@dataclass(slots=True)
class _Training:
    """A simulated accelerator task: steps made at a constant speed until its total."""

    resumed: float
    speed: float
    total: float
    started: float
    """Monotonic."""
    stopped: float | None = None
    finisher: asyncio.TimerHandle | None = None

    def steps(self) -> float:
        until = time.monotonic() if self.stopped is None else self.stopped
        return min(self.total, self.resumed + self.speed * (until - self.started))


class SimulatedExecutor(Executor):
    """Runs no process and keeps nothing on disk: a launched attempt runs at once, with a
    made-up pid, until the agent stops it or `finish()` ends it. An at-most-once attempt the
    fence no longer holds ends when the agent next looks at it.

    Given a `speed`, a task of an accelerator job makes steps at it from those its assignment
    resumes from, reports them as its progress, and exits 0 once it reaches the job's total."""

    poll_interval_s = POLL_INTERVAL_S

    def __init__(self, speed: Speed | None = None) -> None:
        self._speed = speed
        if speed is not None:
            # Few machines train, and their steps are worth reporting as they go.
            self.poll_interval_s = TRAINING_POLL_S
        self._states: dict[AttemptFiles, ShimState] = {}
        self._ends: dict[AttemptFiles, ShimExit] = {}
        self._training: dict[AttemptFiles, _Training] = {}
        self._at_most_once: set[AttemptFiles] = set()
        self._held: frozenset[str] = frozenset()
        self._valid_until = 0.0

    def prepare(self) -> None:
        """Nothing to prepare: no files, no limits."""

    def leftovers(self) -> list[Leftover]:
        # Simulated tasks end with their process; a new agent finds nothing to adopt.
        return []

    def launch(self, files: AttemptFiles, assignment: Assignment, env: dict[str, str]) -> None:
        pid = next(_pids)
        self._states[files] = ShimState(
            shim_pid=pid,
            shim_start=0,
            pid=pid,
            pid_start=0,
            started_at=datetime.now(UTC),
            limits=LIMITS,
        )
        if assignment.at_most_once:
            self._at_most_once.add(files)
        self._train(files, assignment)
        self.wake()

    def _train(self, files: AttemptFiles, assignment: Assignment) -> None:
        gang = assignment.accelerator
        speed = None if gang is None or self._speed is None else self._speed(gang)
        if gang is None or not speed:
            return
        resumed = min(assignment.progress or 0.0, gang.total_steps)
        training = _Training(resumed, speed, gang.total_steps, time.monotonic())
        done = ShimExit(exit_code=0, finished_at=datetime.now(UTC), message="trained")
        training.finisher = asyncio.get_running_loop().call_later(
            (gang.total_steps - resumed) / speed, self._end, files, done
        )
        self._training[files] = training

    def progress(self, files: AttemptFiles) -> float | None:
        training = self._training.get(files)
        return None if training is None else training.steps()

    def fence(self, held: Collection[AttemptFiles], valid_until: float) -> None:
        self._held = frozenset(files.fence_key for files in held)
        self._valid_until = valid_until

    @property
    def running(self) -> list[AttemptFiles]:
        """The attempts that run now."""
        return [files for files in self._states if files not in self._ends]

    def finish(self, task: TaskRef, exit_code: int) -> bool:
        """Ends the task's running attempt as if its process exited with `exit_code` (negative:
        killed by that signal); returns whether one ran."""
        for files in self.running:
            if files.task == task:
                self._end(files, ShimExit(exit_code=exit_code, finished_at=datetime.now(UTC)))
                return True
        return False

    def state(self, files: AttemptFiles) -> ShimState | None:
        return self._states.get(files)

    def end(self, files: AttemptFiles) -> ShimExit | None:
        if files in self._at_most_once and files not in self._ends:
            now = time.monotonic()
            verdict = fence_verdict(self._held, self._valid_until, files.fence_key, now)
            if verdict:
                self._ends[files] = ShimExit(
                    exit_code=-signal.SIGKILL,
                    stopped=True,
                    finished_at=datetime.now(UTC),
                    message=f"fenced: {verdict}",
                )
        return self._ends.get(files)

    def supervised(self, files: AttemptFiles, state: ShimState | None, since: float) -> bool:
        return files in self._states

    def stop(self, files: AttemptFiles, state: ShimState | None, *, force: bool) -> None:
        signum = signal.SIGKILL if force else signal.SIGTERM
        end = ShimExit(exit_code=-signum, stopped=True, finished_at=datetime.now(UTC))
        self._end(files, end)

    def orphaned(self, state: ShimState | None) -> None:
        """Nothing runs unsupervised here."""

    def record_end(self, files: AttemptFiles, end: ShimExit) -> None:
        self._end(files, end)

    def release(self, files: AttemptFiles, keep: int, busy: set[int]) -> None:
        self._states.pop(files, None)
        self._ends.pop(files, None)
        self._training.pop(files, None)
        self._at_most_once.discard(files)

    def close(self) -> None:
        """Nothing to release: the simulated attempts end with the process."""

    def _end(self, files: AttemptFiles, end: ShimExit) -> None:
        if files in self._ends:
            return
        training = self._training.get(files)
        if training is not None:
            training.stopped = time.monotonic()
            if training.finisher is not None:
                training.finisher.cancel()
            end = end.model_copy(update={"finished_at": datetime.now(UTC)})
        self._ends[files] = end
        self.wake()


def simulated_machines(
    count: int,
    *,
    region: str,
    datacenters: Sequence[str],
    msbs_per_dc: int,
    rack_size: int,
    hardware_type: str,
    capacity: Resources,
    prefix: str = "sim",
    gpu_types: Sequence[str] = (),
) -> list[Machine]:
    """`count` machines spread round-robin over the datacenters, then their MSBs, each MSB's
    machines in racks of `rack_size`, and over `gpu_types` (their `gpu_type` attribute) in
    turn. Ids have a fixed width, so that no machine's id starts another's (agents watch their
    id as a key prefix)."""
    width = len(str(count))
    per_round = len(datacenters) * msbs_per_dc
    machines = []
    for i in range(count):
        machine_id = f"{prefix}-{i + 1:0{width}d}"
        rack = (i // per_round) // rack_size + 1
        topology = Topology(
            region=region,
            dc=datacenters[i % len(datacenters)],
            msb=f"msb{(i // len(datacenters)) % msbs_per_dc + 1}",
            rack=f"r{rack}",
        )
        machines.append(
            Machine(
                id=machine_id,
                hostname=machine_id,
                topology=topology,
                hardware_type=hardware_type,
                capacity=capacity,
                attributes=(
                    {GPU_TYPE_ATTRIBUTE: gpu_types[i % len(gpu_types)]} if gpu_types else {}
                ),
            )
        )
    return machines


def profiled_speed(profile: ThroughputProfile, machine: Machine) -> Speed:
    """A gang's speed on the machine's accelerator type, as `profile` measured it."""
    kind = machine.attributes.get(GPU_TYPE_ATTRIBUTE)

    def speed(gang: AcceleratorSpec) -> float | None:
        try:
            return profile.throughputs(gang.job_type, gang.scale_factor).get(str(kind))
        except ProfileError:
            return None  # a job type the profile does not know runs until stopped

    return speed


class AgentFleet(Service):
    """One real `Agent` per machine, each with a `SimulatedExecutor`, all in this process and
    sharing `stores` (round-robin), each through a `FleetStore`: the agents' watches on their
    assignments and allocation records share one watch each, their requests queue for a
    bounded number in flight, and they keep one copy of each job's task template. Thousands of
    machines, without thousands of processes.

    `start()` returns at once and the agents start in the background, `starting_at_once` at a
    time (an agent the store refuses is tried again), so that a signal can stop a fleet that is
    still starting; `started` is set once all run. Each agent's work dir is
    `settings.work_dir / <machine id>` (only a host profile switch writes there). The fleet
    closes the stores on `stop()`. With a throughput `profile`, accelerator tasks make steps
    at its speed for their machine's `gpu_type` (`SimulatedExecutor`). The machines `harvest`
    names are harvest machines replaying their capacity traces.

    The agents' heartbeat lease lasts `lease_ttl_s` (it replaces `settings.lease_ttl_s`), by
    default the region's fencing period: the longest that keeps at-most-once tasks safe, and
    long, as a lapse costs every agent a new registration at once. A longer one than the
    region allows fails `start()` with a `RegionError`, since no agent could ever start.
    """

    name = "agent-sim"

    def __init__(
        self,
        machines: Sequence[Machine],
        settings: AgentSettings,
        stores: Sequence[Store],
        *,
        starting_at_once: int = STARTING_AT_ONCE,
        progress: Callable[[str], None] | None = None,
        profile: ThroughputProfile | None = None,
        lease_ttl_s: int | None = None,
        harvest: Mapping[str, Sequence[HarvestStep]] | None = None,
    ) -> None:
        if not stores:
            raise ValueError("a fleet needs at least one store")
        self.harvest = dict(harvest or {})
        """Machine id -> the capacity trace it replays (a harvest machine)."""
        self.machines = list(machines)
        self._settings = settings
        self._stores = list(stores)
        self._shared: list[FleetStore] = []
        self._watches = SharedWatches(self._stores[0], [keys.ASSIGNMENTS, keys.ALLOCATIONS])
        self._templates = SharedTemplates()
        self._starting_at_once = starting_at_once
        self._progress = progress or _log.info
        self._profile = profile
        self._lease_ttl_s = lease_ttl_s
        self.agents: list[Agent] = []
        self.executors: dict[str, SimulatedExecutor] = {}
        """Each machine's executor, by machine id."""
        self.started = asyncio.Event()
        self._starter: asyncio.Task[None] | None = None

    async def start(self) -> None:
        fencing_s = (await read_region(self._stores[0])).fencing_s
        lease_ttl_s = self._lease_ttl_s or max(1, int(fencing_s))
        if lease_ttl_s > fencing_s:
            raise RegionError(
                f"the region's fencing period ({fencing_s:g}s) is shorter than the simulated "
                f"machines' lease TTL ({lease_ttl_s}s): at-most-once tasks would be killed "
                f"between renewals; use a lease TTL of at most {int(fencing_s)}s "
                "(tether agent-sim --lease-ttl-s), or a region with a longer fencing period "
                "(tether up --fencing-s)"
            )
        self._settings = self._settings.model_copy(update={"lease_ttl_s": lease_ttl_s})
        self._shared = [FleetStore(store, self._watches) for store in self._stores]
        self._starter = asyncio.create_task(self._start_all(), name="starting agents")

    async def _start_all(self) -> None:
        root = self._settings.work_dir or Path(".tether/agent-sim")
        slots = asyncio.Semaphore(self._starting_at_once)
        started_at = time.monotonic()
        step = max(1, len(self.machines) // 10)

        async def start_one(number: int, machine: Machine) -> None:
            profile = self._profile
            executor = SimulatedExecutor(
                None if profile is None else profiled_speed(profile, machine)
            )
            settings = self._settings.model_copy(update={"work_dir": root / machine.id})
            store = self._shared[number % len(self._shared)]
            async with slots:
                while True:
                    agent = Agent(
                        machine,
                        settings,
                        store,
                        executor=executor,
                        owns_store=False,
                        templates=self._templates,
                        harvest=self.harvest.get(machine.id, ()),
                    )
                    try:
                        await agent.start()
                        break
                    except StoreError as error:
                        _log.warning("%s could not start, retrying: %s", agent.name, error)
                        await agent.stop()
                        await asyncio.sleep(RETRY_S)
                    except asyncio.CancelledError:
                        await agent.stop()  # its lease, if it got one, is not renewed on
                        raise
            self.agents.append(agent)
            self.executors[machine.id] = executor
            if len(self.agents) % step == 0 or len(self.agents) == len(self.machines):
                self._progress(
                    f"{len(self.agents):,} of {len(self.machines):,} agents started "
                    f"({time.monotonic() - started_at:.1f} s)"
                )

        await asyncio.gather(*(start_one(n, m) for n, m in enumerate(self.machines)))
        self.started.set()

    async def stop(self) -> None:
        """Stops starting agents, stops every agent (their heartbeats go at once), then
        closes the stores."""
        await cancel_and_wait(self._starter)
        self._starter = None
        slots = asyncio.Semaphore(self._starting_at_once)

        async def stop_one(agent: Agent) -> None:
            async with slots:
                try:
                    await agent.stop()
                except Exception:
                    _log.exception("%s did not stop cleanly", agent.name)

        agents, self.agents = self.agents, []
        await asyncio.gather(*(stop_one(agent) for agent in agents))
        fleet_stores, self._shared = self._shared, []
        for fleet_store in fleet_stores:
            await fleet_store.close()
        await self._watches.stop()
        stores, self._stores = self._stores, []
        for store in stores:
            await store.close()
