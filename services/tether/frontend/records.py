"""Typed reads of store records, and the task views every listing shares."""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pydantic import ValidationError

from tether.frontend.problems import CorruptRecord, Unavailable
from tether.model import (
    ZERO,
    Allocation,
    RegionConfig,
    Resources,
    Task,
    TaskState,
    TaskStatus,
    TetherModel,
    current_status,
    effective_state,
    from_json,
)
from tether.store import KeyValue, Store, keys
from tether.store.cache import CachedReads, StoreCache

M = TypeVar("M", bound=TetherModel)


@dataclass(frozen=True, slots=True)
class Record(Generic[M]):
    """A model read from the store, with the key-value it came from (for compare-and-swap)."""

    model: M
    kv: KeyValue


def load(cls: type[M], kv: KeyValue) -> M:
    """The stored record `kv` as a `cls`; a record that does not validate is a 500 naming it."""
    try:
        record: M = _decoded(cls, kv.value)
    except ValidationError as exc:
        raise CorruptRecord(f"{kv.key} is not a valid {cls.__name__}: {exc}") from None
    return record


@functools.lru_cache(maxsize=8192)
def _decoded(cls: type[M], value: bytes) -> M:
    # A GET decodes the same records again and again (from the cache, the same bytes object,
    # whose hash Python keeps): a record decodes once while it is asked for. Models are frozen,
    # and nothing here changes one in place.
    return from_json(cls, value, stored=True)


async def get(store: Store, key: str, cls: type[M]) -> Record[M] | None:
    """The record at `key`, or None when it is missing."""
    return record_of(cls, await store.get(key))


def record_of(cls: type[M], kv: KeyValue | None) -> Record[M] | None:
    """The stored record `kv` as a `cls` (None for none)."""
    return None if kv is None else Record(load(cls, kv), kv)


async def get_confirmed(
    store: Store,
    cache: StoreCache,
    key: str,
    cls: type[M],
    usable: Callable[[M], bool] = lambda _model: True,
) -> Record[M] | None:
    """The record at `key` as the frontend's cache holds it, not waiting for the cache to catch
    up; from the store when the cache has none or one that is not `usable`. What a write
    checks before it writes: the cache may be a moment behind, so a refusal is confirmed (a
    record made a moment ago, perhaps through another frontend), and a consent holds until the
    cache hears otherwise."""
    record = await get(as_cached(store, cache), key, cls)
    if record is None or not usable(record.model):
        record = await get(store, key, cls)
    return record


def as_cached(store: Store, cache: StoreCache) -> Store:
    """Reads from the frontend's cache as it is, for a write that compares what it read: it
    neither waits for the cache to catch up nor reports the revision read (the answer is the
    write's)."""
    return CachedReads(store, cache, _unnoted)


def _unnoted(_revision: int) -> None:
    pass


async def scan(store: Store, prefix: str, cls: type[M]) -> list[M]:
    """Every record under `prefix`, in key order."""
    return [load(cls, kv) for kv in (await store.range(prefix)).kvs]


@dataclass(slots=True)
class MachineAllocation:
    """A machine's allocation record (None: none stored) and what each task placed on it holds,
    by task id (`<entitlement>/<job>/<index>`)."""

    record: Allocation | None = None
    tasks: dict[str, Resources] = field(default_factory=dict)

    def used(self) -> Resources:
        """The sum of what its tasks hold."""
        return sum(self.tasks.values(), ZERO)


async def allocations(store: Store) -> dict[str, MachineAllocation]:
    """Every machine's allocation record and entries, by machine id, from one read."""
    found: defaultdict[str, MachineAllocation] = defaultdict(MachineAllocation)
    for kv in (await store.range(keys.ALLOCATIONS)).kvs:
        machine_id, task_id = keys.split_allocation(kv.key)
        if task_id is None:
            found[machine_id].record = load(Allocation, kv)
        else:
            found[machine_id].tasks[task_id] = load(Resources, kv)
    return dict(found)


@dataclass(frozen=True, slots=True)
class TaskRecords:
    """A task and the status its agent last wrote for it (None: none yet)."""

    task: Task
    status: TaskStatus | None

    @property
    def current_status(self) -> TaskStatus | None:
        """The status when it is about the task's current attempt on its current machine."""
        return current_status(self.task, self.status)

    @property
    def state(self) -> TaskState:
        return effective_state(self.task, self.status)


async def _read_tasks(
    store: Store, task_prefix: str, status_prefix: str
) -> tuple[list[TaskRecords], list[TaskStatus]]:
    """The tasks under `task_prefix` with their statuses under `status_prefix`, by index; and
    every status there, those kept past their task's preemption too."""
    tasks = await store.range(task_prefix)
    # Each as new as its source has it: the frontend's cache copies the tasks and the statuses
    # at revisions of their own (a snapshot of both would read the store). A status of another
    # attempt than its task's is not the task's (`current_status`), whichever is newer.
    statuses = {
        keys.task_of_key(kv.key): load(TaskStatus, kv)
        for kv in (await store.range(status_prefix)).kvs
    }
    found = [
        TaskRecords(load(Task, kv), statuses.get(keys.task_of_key(kv.key))) for kv in tasks.kvs
    ]
    # Keys sort "10" before "2".
    return sorted(found, key=lambda records: records.task.index), list(statuses.values())


async def job_tasks(store: Store, ent: str, job: str) -> tuple[list[TaskRecords], list[TaskStatus]]:
    """The tasks of one job with their statuses, by index, and every status of the job."""
    return await _read_tasks(store, keys.tasks_of(ent, job), keys.statuses_of(ent, job))


def fewest_steps(statuses: Iterable[TaskStatus], count: int) -> float | None:
    """The fewest steps any of a job's `count` tasks reported, by whichever attempt (a
    preempted task's status outlives it); None unless every one of them reported."""
    steps = {status.index: status.progress for status in statuses}
    reported = [steps.get(index) for index in range(count)]
    return None if None in reported else min(s for s in reported if s is not None)


async def tasks_by_job(store: Store, ent: str | None = None) -> dict[str, list[TaskRecords]]:
    """Tasks with their statuses by job handle, by index: of one entitlement's jobs when `ent`
    is given, else of the whole region."""
    if ent is None:
        found, _ = await _read_tasks(store, keys.TASKS, keys.TASK_STATUS)
    else:
        found, _ = await _read_tasks(
            store, keys.tasks_of_entitlement(ent), keys.statuses_of_entitlement(ent)
        )
    grouped: defaultdict[str, list[TaskRecords]] = defaultdict(list)
    for records in found:
        grouped[records.task.job].append(records)
    return dict(grouped)


def state_counts(states: Iterable[TaskState]) -> dict[str, int]:
    """How many tasks are in each state, every state listed (0 when none)."""
    counts = Counter(states)
    return {state.value: counts[state] for state in TaskState}


async def region_config(store: Store) -> RegionConfig:
    """The region's config; 503 while the region is not initialised."""
    return (await region_config_record(store)).model


async def region_config_record(store: Store) -> Record[RegionConfig]:
    """The region's config with its key-value, for changing it; 503 while there is none."""
    config = await get(store, keys.region_config(), RegionConfig)
    if config is None:
        raise Unavailable("the region is not initialised (no region config); run `tether up`")
    return config
