"""The rebalancer simulator's world: the allocator's own index and planner place and move tasks
(and answer Suggest, `allocator.questions.suggest`), the rebalancer's own strategies and planner
choose the moves, and the scheduler's own built-in rule (`taskcontrol.default_acks`) approves
them, on a simulated clock. Nothing here decides for them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from tests.support.allocator_builders import Region, entitlement, job, machine
from tether.allocator.index import FREE
from tether.allocator.questions import suggest
from tether.model import (
    Entitlement,
    Job,
    Machine,
    MachineState,
    OperationState,
    Placement,
    Resources,
    Spread,
    Task,
    TaskOperation,
    TaskState,
    TaskStatus,
)
from tether.rebalancer.planner import Limits, RoundPlan, plan_round
from tether.rebalancer.proposals import move_operation
from tether.rebalancer.strategies.base import by_job
from tether.rebalancer.strategies.registry import STRATEGIES
from tether.rebalancer.view import PlacedTask, RegionView, amounts
from tether.scheduler.plan import JobView, Stored
from tether.scheduler.taskcontrol import Pending, default_acks

CORES, MEMORY_MIB = 16, 64 * 1024
SHAPES = (
    Resources(cpu=1000, memory_mib=2048),
    Resources(cpu=2000, memory_mib=8192),
    Resources(cpu=4000, memory_mib=4096),
    Resources(cpu=1000, memory_mib=12288),
)
"""Tasks of services: small, balanced, CPU-heavy and memory-heavy."""
PROBE = Resources(cpu=8000, memory_mib=32768)
"""The task of the largest placeable job: half a machine."""
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class SimJob:
    job: Job
    owner: Entitlement
    down_until: dict[int, float] = field(default_factory=dict)
    """Task index -> when a moved task runs again (placed anew and started)."""
    attempts: Counter[int] = field(default_factory=Counter)
    moves: dict[str, TaskOperation] = field(default_factory=dict)
    """Its rebalancer moves not executed yet, by id."""
    unplaced: set[int] = field(default_factory=set)
    """Tasks a move released that fit nowhere since: down until placed."""


@dataclass(slots=True)
class Tally:
    rounds: int = 0
    moves_proposed: int = 0
    moves_done: int = 0
    by_strategy: Counter[str] = field(default_factory=Counter)
    deferred: Counter[str] = field(default_factory=Counter)
    unavailability_violations: int = 0
    """Job-steps with more of a job down than its update policy allows."""
    most_down: int = 0
    """The most tasks of one job down at once."""


class World:
    """`machines` machines of 16 cores and 64 GiB over `dcs` datacenters of `msbs` MSBs each,
    shared by `teams` entitlements whose services arrive until the region is about `use` used."""

    def __init__(self, machines: int, dcs: int, msbs: int, teams: int, seed: int) -> None:
        self.region = Region()
        self.rng = np.random.default_rng(seed)
        self.machines: dict[str, Machine] = {}
        for number in range(machines):
            dc, msb = number % dcs, (number // dcs) % msbs
            machine_id = f"m{number:04d}"
            self.machines[machine_id] = machine(
                machine_id,
                dc=f"dc{dc}",
                msb=f"msb{msb}",
                rack=f"r{number // (dcs * msbs * 4)}",
                cpu=CORES * 1000,
                memory=MEMORY_MIB,
            )
            self.region.add(self.machines[machine_id])
        self.teams = [entitlement(f"team{t}", cpu=10**9, memory=10**9) for t in range(teams)]
        self.probe_owner = entitlement("probe", cpu=10**9, memory=10**9)
        self.region.entitle(*self.teams, self.probe_owner)
        self.jobs: dict[str, SimJob] = {}
        self._arrived = 0
        self._proposed_at: list[float] = []
        self.tally = Tally()

    # --- churn ---------------------------------------------------------------------------------

    def fill(self, use: float, packed_share: float) -> None:
        """Services arrive until the region is `use` used; while the first `packed_share` of
        them arrive, the machines of two MSBs drain (a maintenance), so those pack elsewhere."""
        draining = [m for m in self.machines.values() if m.topology.msb in ("msb0", "msb1")]
        self._set_state(draining, MachineState.DRAINING)
        capacity = len(self.machines) * CORES * 1000
        while self._used_cpu() < use * capacity:
            if draining and self._used_cpu() >= packed_share * use * capacity:
                self._set_state(draining, MachineState.UP)
                draining = []
            if not self._arrive():
                break
        self._set_state(draining, MachineState.UP)

    def churn(self, leave_share: float) -> None:
        """Services leave at random, `leave_share` of them: their machines are left part used."""
        leaving = self.rng.choice(
            sorted(self.jobs), size=int(len(self.jobs) * leave_share), replace=False
        )
        for handle in leaving:
            sim = self.jobs.pop(str(handle))
            for index in list(self.region.index.held(sim.job.handle)):
                self._release(sim, index)

    def _arrive(self) -> bool:
        number = self._arrived
        owner = self.teams[int(self.rng.integers(len(self.teams)))]
        shape = SHAPES[int(self.rng.integers(len(SHAPES)))]
        count = int(self.rng.integers(2, 13))
        spec = job(
            f"svc{number:05d}",
            entitlement=owner.name,
            count=count,
            cpu=shape.cpu,
            memory=shape.memory_mib,
            placement=Placement(spread=Spread(max_skew=1)),
        )
        choice = self.region.choose(spec, owner)
        if len(choice.placements) < count:
            return False
        self.region.commit(spec, owner, choice)
        self.jobs[spec.handle] = SimJob(spec, owner)
        self._arrived += 1
        return True

    def _set_state(self, machines: list[Machine], state: MachineState) -> None:
        for found in machines:
            self.machines[found.id] = found.model_copy(update={"state": state})
            self.region.add(self.machines[found.id])

    def _used_cpu(self) -> int:
        index = self.region.index
        column = index.dimensions.index("cpu")
        rows = index.rows
        return int((index.capacity[:rows, column] - index.free[:rows, column]).sum())

    # --- what the rebalancer reads -------------------------------------------------------------

    def view(self, now_s: float) -> RegionView:
        index = self.region.index
        owners = {
            machine_id: index.owners.name(int(index.owner[index.row_of[machine_id]]))
            for machine_id in self.machines
        }
        tasks = {}
        for handle, sim in self.jobs.items():
            resources = amounts(sim.job.spec.task.resources)
            for task_index, machine_id in index.placements(handle).items():
                healthy = sim.down_until.get(task_index, 0.0) <= now_s
                placed = PlacedTask(
                    handle, task_index, machine_id, resources, sim.attempts[task_index], healthy
                )
                tasks[placed.id] = placed
        jobs = {handle: sim.job for handle, sim in self.jobs.items()}
        operations = {h: list(sim.moves.values()) for h, sim in self.jobs.items() if sim.moves}
        down = {h: len(sim.unplaced) for h, sim in self.jobs.items() if sim.unplaced}
        return RegionView(dict(self.machines), owners, jobs, tasks, operations, down)

    def measures(self, now_s: float) -> dict[str, float]:
        view = self.view(now_s)
        return {name: make(view).measure(view) for name, make in STRATEGIES.items()}

    def largest_placeable(self) -> int:
        """How many tasks of half a machine a new job could place now (read-only)."""
        probe = job(
            "probe",
            entitlement=self.probe_owner.name,
            count=2 * len(self.machines),
            cpu=PROBE.cpu,
            memory=PROBE.memory_mib,
            placement=Placement(spread=Spread(max_skew=10**6)),
        )
        return len(self.region.choose(probe, self.probe_owner).placements)

    # --- a round, approvals, moves -------------------------------------------------------------

    def round(self, limits: Limits, now_s: float) -> RoundPlan:
        """One round of the rebalancer: its moves become open MOVE operations of their jobs."""
        view = self.view(now_s)
        strategies = [make(view) for make in STRATEGIES.values()]
        candidates = [(s, c) for s in strategies for c in s.candidates(view)]
        suggestions = {}
        for strategy in strategies:
            found: dict[str, str] = {}
            for handle, indexes in by_job([c for s, c in candidates if s is strategy]).items():
                sim = self.jobs[handle]
                answer = suggest(self.region.index, self.region.cache, sim.job, sim.owner, indexes)
                found |= {f"{handle}/{i}": machine_id for i, machine_id in answer.machines.items()}
            suggestions[strategy.name] = found
        lately = sum(1 for at_s in self._proposed_at if now_s - at_s < 60)
        plan = plan_round(view, strategies, candidates, suggestions, limits, proposed_lately=lately)
        for move in plan.moves:
            self._proposed_at.append(now_s)
            operation = move_operation(move, _at(now_s))
            self.jobs[move.job].moves[operation.id] = operation
            self.tally.by_strategy[move.strategy] += 1
        self.tally.rounds += 1
        self.tally.moves_proposed += len(plan.moves)
        self.tally.deferred.update(plan.deferred)
        return plan

    def approve(self, now_s: float, restart_s: float) -> None:
        """Every job with moves waiting asks the built-in rule, which approves within the job's
        update policy; an approved move is executed at once: the task released, then placed on
        its target if that still takes it, down for `restart_s`."""
        for sim in self.jobs.values():
            for task_index in sorted(sim.unplaced):
                if self._place_again(sim, task_index, now_s, restart_s):
                    sim.unplaced.discard(task_index)
            if not sim.moves:
                continue
            view = self._job_view(sim, now_s)
            for approved in default_acks(view, Pending.of(view)):
                self._execute(sim, sim.moves.pop(approved), now_s, restart_s)

    def check(self, now_s: float) -> None:
        """Counts the jobs with more tasks down than their update policy allows."""
        for sim in self.jobs.values():
            down = len(sim.unplaced) + sum(
                1
                for task, until in sim.down_until.items()
                if until > now_s and task not in sim.unplaced
            )
            self.tally.most_down = max(self.tally.most_down, down)
            spec = sim.job.spec
            budget = max(1, spec.count * spec.update.max_unavailable_percent // 100)
            self.tally.unavailability_violations += down > budget

    def _execute(self, sim: SimJob, move: TaskOperation, now_s: float, restart_s: float) -> None:
        [task_index] = move.tasks
        target = self.region.index.row_of.get(move.target_machine or "")
        self._release(sim, task_index)
        self.tally.moves_done += 1
        if not self._place_again(sim, task_index, now_s, restart_s, target):
            sim.unplaced.add(task_index)

    def _place_again(
        self,
        sim: SimJob,
        task_index: int,
        now_s: float,
        restart_s: float,
        target: int | None = None,
    ) -> bool:
        """Places a released task (on `target` if it still takes it); down `restart_s` from now."""
        keep = {} if target is None else {task_index: target}
        choice = self.region.choose(sim.job, sim.owner, [task_index], keep)
        if not choice.placements:
            return False
        self.region.commit(sim.job, sim.owner, choice)
        sim.attempts[task_index] += 1
        sim.down_until[task_index] = now_s + restart_s
        return True

    def _release(self, sim: SimJob, task_index: int) -> None:
        """Takes the task off its machine as Release does; a machine left empty goes back to
        the free pool at once (the allocator waits its idle delay)."""
        index = self.region.index
        row = index.held(sim.job.handle)[task_index]
        self.region.revision += 1
        emptied = int(index.task_count[row]) == 1
        header = FREE if emptied else index.header(row)
        index.remove(row, sim.job.handle, [task_index], header, self.region.revision)

    def _job_view(self, sim: SimJob, now_s: float) -> JobView:
        """The job as the scheduler's approval step sees it: tasks running unless down."""
        handle, now = sim.job.handle, _at(now_s)
        tasks, statuses = {}, {}
        for task_index, machine_id in self.region.index.placements(handle).items():
            attempt = sim.attempts[task_index]
            running = sim.down_until.get(task_index, 0.0) <= now_s
            state = TaskState.RUNNING if running else TaskState.STARTING
            task = Task(
                job=handle,
                index=task_index,
                generation=1,
                attempt=attempt,
                machine=machine_id,
                state=state,
                version="1.0",
                updated_at=now,
            )
            tasks[task_index] = Stored(task, 1)
            statuses[task_index] = TaskStatus(
                job=handle,
                index=task_index,
                machine=machine_id,
                attempt=attempt,
                state=state,
                updated_at=now,
            )
        operations = {
            op_id: Stored(op.model_copy(update={"state": OperationState.PENDING_APPROVAL}), 1)
            for op_id, op in sim.moves.items()
        }
        return JobView(Stored(sim.job, 1), tasks, statuses, {}, 0, operations=operations)


def _at(now_s: float) -> datetime:
    return EPOCH + timedelta(seconds=now_s)
