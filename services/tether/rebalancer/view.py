"""What the rebalancer plans on: the region's machines, the tasks each holds, their jobs and
open operations, read once per round; moves are tried on it and taken back (no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tether.model import FaultDomain, Job, Machine, MachineState, Resources, TaskOperation

DIMENSIONS = ("cpu", "memory_mib", "gpus", "disk_gib")
"""The resources the measures weigh (a label of `extra` is a machine's own business)."""


def amounts(resources: Resources) -> tuple[float, ...]:
    return tuple(float(getattr(resources, dimension)) for dimension in DIMENSIONS)


@dataclass(frozen=True, slots=True)
class PlacedTask:
    """A task that runs, or should, on a machine."""

    job: str
    index: int
    machine: str
    resources: tuple[float, ...]
    attempt: int
    healthy: bool
    """It runs its current attempt."""

    @property
    def id(self) -> str:
        return f"{self.job}/{self.index}"


@dataclass(frozen=True, slots=True)
class Move:
    """One task to another machine."""

    task: PlacedTask
    target: str


@dataclass(slots=True)
class Applied:
    """Moves tried on a view, as `RegionView.undo` takes them back."""

    moves: list[Move] = field(default_factory=list)
    """Each task as it is now, with the machine it came from."""
    joined: list[str] = field(default_factory=list)
    """Machines of the free pool that the moves made an entitlement's."""


@dataclass(slots=True)
class RegionView:
    """The region as one round reads it. `used` and the tasks' machines change as moves are
    tried (`apply`) and taken back (`undo`); everything else stays as read."""

    machines: Mapping[str, Machine]
    owners: dict[str, str | None]
    """Machine -> the entitlement it belongs to (None: the free pool); a task moved to a
    machine of the pool makes it its entitlement's, as the allocator's commit does."""
    jobs: Mapping[str, Job]
    tasks: dict[str, PlacedTask]
    """Task id -> the task, on the machine a tried move put it."""
    operations: Mapping[str, Sequence[TaskOperation]] = field(default_factory=dict)
    """Job -> its open operations (a job with one is left alone)."""
    down: Mapping[str, int] = field(default_factory=dict)
    """Job -> its tasks that should run and have no machine the round knows (waiting for one,
    or on a machine gone from the region): a job with one is left alone."""
    used: dict[str, list[float]] = field(init=False)
    by_machine: dict[str, set[str]] = field(init=False)
    by_job: dict[str, list[str]] = field(init=False)
    """Job -> its tasks' ids (they keep their ids as they move)."""

    def __post_init__(self) -> None:
        self.used = {machine: [0.0] * len(DIMENSIONS) for machine in self.machines}
        self.by_machine = {machine: set() for machine in self.machines}
        self.by_job = {}
        for task in self.tasks.values():
            self._add(task, task.machine)
            self.by_job.setdefault(task.job, []).append(task.id)

    # --- reading -----------------------------------------------------------------------------

    def capacity(self, machine: str) -> tuple[float, ...]:
        return amounts(self.machines[machine].usable())

    def free_share(self, machine: str) -> float:
        """The share of the machine still free in every resource it has (its scarcest)."""
        shares = [
            1.0 - used / capacity
            for used, capacity in zip(self.used[machine], self.capacity(machine), strict=True)
            if capacity > 0
        ]
        return max(0.0, min(shares, default=0.0))

    def used_share(self, machine: str) -> float:
        """The share of its scarcest resource that tasks use (its dominant share)."""
        shares = [
            used / capacity
            for used, capacity in zip(self.used[machine], self.capacity(machine), strict=True)
            if capacity > 0
        ]
        return max(shares, default=0.0)

    def fits(self, machine: str) -> bool:
        """Whether what the machine holds fits in what it can use now."""
        return all(
            used <= capacity
            for used, capacity in zip(self.used[machine], self.capacity(machine), strict=True)
        )

    def is_up(self, machine: str) -> bool:
        return self.machines[machine].state is MachineState.UP

    def domain(self, machine: str, level: FaultDomain) -> str:
        return level.of(self.machines[machine].topology)

    def tasks_on(self, machine: str) -> list[PlacedTask]:
        return [self.tasks[task] for task in sorted(self.by_machine[machine])]

    def tasks_of(self, job: str) -> list[PlacedTask]:
        return [self.tasks[task] for task in self.by_job.get(job, ())]

    def movable(self, job: str) -> bool:
        """Whether the rebalancer may move tasks of the job now: it exists and is not deleting,
        every task of it runs on a machine of the round (a move takes one down, and one that is
        down already may be all the job can spare), and no operation of it is open."""
        spec = self.jobs.get(job)
        if spec is None or spec.deleting or self.operations.get(job) or self.down.get(job):
            return False
        return all(task.healthy for task in self.tasks_of(job))

    # --- trying moves ------------------------------------------------------------------------

    def apply(self, moves: Iterable[Move]) -> Applied:
        """Tries the moves on the view; returns what `undo` takes to take them back."""
        applied = Applied()
        for move in moves:
            current = self.tasks[move.task.id]
            self._move(current, move.target)
            applied.moves.append(Move(self.tasks[current.id], current.machine))
            if move.target in self.owners and self.owners[move.target] is None:
                self.owners[move.target] = self.jobs[current.job].spec.entitlement
                applied.joined.append(move.target)
        return applied

    def undo(self, applied: Applied) -> None:
        for move in reversed(applied.moves):
            self._move(move.task, move.target)
        for machine in applied.joined:
            self.owners[machine] = None

    def _move(self, task: PlacedTask, machine: str) -> None:
        self._remove(task)
        moved = _on(task, machine)
        self.tasks[moved.id] = moved
        self._add(moved, machine)

    def _add(self, task: PlacedTask, machine: str) -> None:
        if machine not in self.used:
            return  # a machine no longer in the region
        self.by_machine[machine].add(task.id)
        for position, amount in enumerate(task.resources):
            self.used[machine][position] += amount

    def _remove(self, task: PlacedTask) -> None:
        if task.machine not in self.used:
            return
        self.by_machine[task.machine].discard(task.id)
        for position, amount in enumerate(task.resources):
            self.used[task.machine][position] -= amount


def _on(task: PlacedTask, machine: str) -> PlacedTask:
    return PlacedTask(task.job, task.index, machine, task.resources, task.attempt, task.healthy)
