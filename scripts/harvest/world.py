"""The harvest simulator's world: the allocator's own index and planner, and the broker's own
choice of the tasks a shrink moves (`broker.harvest.displaced`), driven by a simulated clock
over harvest machines that replay capacity traces. Nothing sleeps; nothing here decides for
them."""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harvest.traces import TraceShape, trace
from tests.support.allocator_builders import Region, entitlement, job, machine
from tether.allocator.index import FREE
from tether.broker.harvest import displaced
from tether.model import Job, Machine, Placement, Resources, Spread
from tether.model.machine import Harvest, HarvestStep

CORES, MEMORY_MIB = 16, 64 * 1024
TASK = Resources(cpu=1000, memory_mib=2048)
"""One instance of a service: a core and its share of memory."""
MAX_INSTANCES = 20_000
"""Instances a service may run at once (its job's count)."""
ARRIVE, FINISH, STEP, DEADLINE = 0, 1, 2, 3
"""Event kinds, in the order they are handled at one instant."""


@dataclass(slots=True)
class Invocation:
    service: int
    index: int
    """Its task index in the service's job."""
    duration_s: float
    ends_at: float
    row: int = -1
    displaced_by: float | None = None
    """The deadline of the notice that moves it off its machine (None: not displaced)."""


@dataclass(slots=True)
class Tally:
    invocations: int = 0
    succeeded: int = 0
    rejected: int = 0
    """No machine had room when it arrived."""
    killed: int = 0
    """Its machine shrank or went away under it without notice, or it could not be moved."""
    moved: int = 0
    cold_starts: int = 0
    """Starts on a machine where the service ran no instance within the keep-alive."""
    notices: Counter[str] = field(default_factory=Counter)


class World:
    """`machines` machines, `harvest_share` of them harvest ones replaying seeded traces, and
    `services` jobs whose instances arrive as Poisson processes."""

    def __init__(
        self,
        *,
        machines: int,
        harvest_share: float,
        services: int,
        shape: TraceShape,
        horizon_s: float,
        min_worker_set: bool,
        notices: bool,
        notice_s: float,
        keep_alive_s: float,
        seed: int,
    ) -> None:
        self.region = Region()
        self.owner = entitlement("svc", cpu=10**9, memory=10**9)
        self.region.entitle(self.owner)
        rng = np.random.default_rng(seed)
        capacity = Resources(cpu=CORES * 1000, memory_mib=MEMORY_MIB)
        self.harvested = int(machines * harvest_share)
        self._events: list[tuple[float, int, int, Any]] = []
        self._sequence = 0
        self.machines: dict[str, Machine] = {}
        for number in range(machines):
            machine_id = f"m{number:04d}"
            harvest = Harvest(usable=capacity) if number < self.harvested else None
            self.machines[machine_id] = machine(
                machine_id,
                cpu=capacity.cpu,
                memory=capacity.memory_mib,
                msb=f"msb{number % 8}",
                rack=f"r{number // 4}",
                harvest=harvest,
            )
            self.region.add(self.machines[machine_id])
            if harvest is not None:
                for step in trace(capacity, horizon_s, shape, rng):
                    self._at(step.at_s, STEP, (machine_id, step))
        spread = Spread(max_skew=10**6) if min_worker_set else Spread()
        placement = Placement(harvest=True, min_worker_set=min_worker_set, spread=spread)
        self.jobs: list[Job] = [
            job(
                f"s{n:03d}",
                entitlement="svc",
                count=MAX_INSTANCES,
                cpu=TASK.cpu,
                memory=TASK.memory_mib,
                placement=placement,
            )
            for n in range(services)
        ]
        self.notices, self.notice_s, self.keep_alive_s = notices, notice_s, keep_alive_s
        self.running: dict[tuple[int, int], Invocation] = {}
        self.on_row: defaultdict[int, set[tuple[int, int]]] = defaultdict(set)
        self.last_seen: dict[tuple[int, int], float] = {}
        """(service, row) -> when the service last had an instance there."""
        self.free_indexes: list[list[int]] = [[] for _ in range(services)]
        """Task indexes of each service's ended instances, used again (a job's are bounded)."""
        self.next_index = [0] * services
        self.tally = Tally()
        self.now_s = 0.0

    def _at(self, at_s: float, kind: int, subject: Any) -> None:
        self._sequence += 1
        heapq.heappush(self._events, (at_s, kind, self._sequence, subject))

    def run(self, arrivals: list[tuple[float, int, float]]) -> Tally:
        """Replays `arrivals` ((time, service, duration) in time order) with the traces."""
        for at_s, service, duration_s in arrivals:
            self._at(at_s, ARRIVE, (service, duration_s))
        while self._events:
            at_s, kind, _, subject = heapq.heappop(self._events)
            self.now_s = at_s
            if kind == ARRIVE:
                self._arrive(*subject)
            elif kind == FINISH:
                self._finish(subject)
            elif kind == STEP:
                self._step(*subject)
            else:
                self._deadline(subject)
        return self.tally

    # --- instances ---------------------------------------------------------------------------

    def _arrive(self, service: int, duration_s: float) -> None:
        self.tally.invocations += 1
        if self.free_indexes[service]:
            index = self.free_indexes[service].pop()
        else:
            index = self.next_index[service]
            self.next_index[service] += 1
        invocation = Invocation(service, index, duration_s, self.now_s + duration_s)
        if not self._start(invocation):
            self.tally.rejected += 1
            self.free_indexes[service].append(index)
            return
        self._at(invocation.ends_at, FINISH, (service, index))

    def _start(self, invocation: Invocation) -> bool:
        """Places the invocation's task with the real planner; False if nothing has room."""
        placed_job = self.jobs[invocation.service]
        choice = self.region.choose(placed_job, self.owner, [invocation.index])
        if choice.unplaced:
            return False
        self.region.commit(placed_job, self.owner, choice)
        row = choice.placements[invocation.index]
        warm = self.last_seen.get((invocation.service, row), -np.inf)
        busy = any(key[0] == invocation.service for key in self.on_row[row])
        if not busy and self.now_s - warm > self.keep_alive_s:
            self.tally.cold_starts += 1
        invocation.row, invocation.displaced_by = row, None
        key = (invocation.service, invocation.index)
        self.running[key] = invocation
        self.on_row[row].add(key)
        return True

    def _stop(self, invocation: Invocation) -> None:
        """Takes the invocation's task off its machine, as a release does."""
        key = (invocation.service, invocation.index)
        row = invocation.row
        index = self.region.index
        self.on_row[row].discard(key)
        self.last_seen[(invocation.service, row)] = self.now_s
        self.region.revision += 1
        emptied = int(index.task_count[row]) == 1
        header = FREE if emptied else index.header(row)
        handle = self.jobs[invocation.service].handle
        index.remove(row, handle, [invocation.index], header, self.region.revision)

    def _finish(self, key: tuple[int, int]) -> None:
        invocation = self.running.get(key)
        if invocation is None or invocation.ends_at != self.now_s:
            return  # killed, or moved and started again, to a later end
        del self.running[key]
        self._stop(invocation)
        self.free_indexes[invocation.service].append(invocation.index)
        self.tally.succeeded += 1

    # --- the traces ----------------------------------------------------------------------------

    def _step(self, machine_id: str, step: HarvestStep) -> None:
        row = self.region.row(machine_id)
        if step.evict_in_s is not None:
            self.tally.notices["eviction"] += 1
            victims = list(self.on_row[row])
            gone_at = self.now_s + step.evict_in_s if self.notices else self.now_s
            # It takes no new task from now on, whatever the notice: the broker drains it.
            self._set(machine_id, Harvest(usable=Resources()))
            self._displace(victims, gone_at)
            return
        assert step.usable is not None
        self._set(machine_id, Harvest(usable=step.usable))
        held = {f"{k[0]}/{k[1]}": TASK for k in self.on_row[row]}
        moving = displaced(held, {}, step.usable)
        if moving:
            self.tally.notices["harvest-shrink"] += 1
            keys = [_key(task) for task in moving]
            deadline = self.now_s + self.notice_s if self.notices else self.now_s
            self._displace(keys, deadline)

    def _set(self, machine_id: str, harvest: Harvest) -> None:
        changed = self.machines[machine_id].model_copy(update={"harvest": harvest})
        self.machines[machine_id] = changed
        self.region.add(changed)

    def _displace(self, keys: list[tuple[int, int]], deadline: float) -> None:
        """Moves the instances off by `deadline`: those that end before it finish where they
        are; the others move then (or die then, without notice)."""
        for key in keys:
            invocation = self.running.get(key)
            if invocation is None:
                continue
            if invocation.ends_at <= deadline and deadline > self.now_s:
                continue  # it ends within the notice
            invocation.displaced_by = deadline
            self._at(deadline, DEADLINE, key)

    def _deadline(self, key: tuple[int, int]) -> None:
        invocation = self.running.get(key)
        if invocation is None or invocation.displaced_by != self.now_s:
            return
        self._stop(invocation)
        if not self.notices:
            self._drop(invocation)
            return
        # Moved: started anew elsewhere, from the beginning (the allocator sees the machine's
        # smaller share already).
        if self._start(invocation):
            self.tally.moved += 1
            invocation.ends_at = self.now_s + invocation.duration_s
            self._at(invocation.ends_at, FINISH, key)
        else:
            self._drop(invocation)

    def _drop(self, invocation: Invocation) -> None:
        """The invocation is killed: it ran on a machine taken away, with nowhere to go."""
        self.running.pop((invocation.service, invocation.index))
        self.free_indexes[invocation.service].append(invocation.index)
        self.tally.killed += 1


def _key(task: str) -> tuple[int, int]:
    """(service, index) of a task id "<service>/<index>" as `displaced` names them here."""
    service, index = task.split("/")
    return int(service), int(index)
