"""Invariants read back from the store: over-commit, quotas, tasks held twice, free per MSB."""

from __future__ import annotations

import json
from array import array
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from tether.model import Entitlement, from_json
from tether.store import Store, keys

# etcd counts the rest of the range on every page: big pages keep a read-back linear.
PAGE: Final = 50_000
# Bits of the task index in a task's numeric id (job number << bits | index).
INDEX_BITS: Final = 32
# JSON field -> the label `Resources.amounts()` gives the dimension, as quotas are compared.
LABELS: Final = (("cpu", "cpu"), ("memory_mib", "memory"), ("disk_gib", "disk"), ("gpus", "gpus"))


@dataclass(slots=True)
class Audit:
    """What the store holds once the allocators stopped."""

    machines: int = 0
    overcommitted_machines: int = 0
    tasks: int = 0
    tasks_held_twice: int = 0
    owned_machines: int = 0
    """Machines whose allocation record names an entitlement."""
    quota_violations: list[str] = field(default_factory=list)
    msb_free: dict[str, tuple[float, float]] = field(default_factory=dict)
    """MSB path -> free fraction of (CPU, memory)."""


@dataclass(slots=True)
class _Allocation:
    """A machine's allocation record and its entries (task id -> resources), as JSON data."""

    record: dict[str, Any] = field(default_factory=dict)
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(slots=True)
class _Totals:
    used: dict[str, Counter[str]] = field(default_factory=dict)
    """Entitlement -> resources its tasks hold ("extra/<name>" for extra resources)."""
    owned: dict[str, Counter[str]] = field(default_factory=dict)
    """Entitlement -> machines it owns by hardware type."""
    msb: dict[str, list[int]] = field(default_factory=dict)
    """MSB path -> [cpu capacity, cpu used, memory capacity, memory used]."""
    job_numbers: dict[str, int] = field(default_factory=dict)
    task_ids: array[int] = field(default_factory=lambda: array("q"))


async def audit(store: Store) -> Audit:
    """Reads every machine and allocation record at one revision, a page at a time."""
    revision = await store.revision()
    result, totals = Audit(), _Totals()
    allocations = aiter(_machine_allocations(store, revision))
    pending = await anext(allocations, None)
    async for machine_id, machine in _paged(store, keys.MACHINES, revision):
        while pending is not None and pending[0] < machine_id:
            _visit(result, totals, None, pending[1])
            pending = await anext(allocations, None)
        if pending is not None and pending[0] == machine_id:
            _visit(result, totals, machine, pending[1])
            pending = await anext(allocations, None)
        else:
            _visit(result, totals, machine, _Allocation())
    while pending is not None:
        _visit(result, totals, None, pending[1])
        pending = await anext(allocations, None)
    ids = np.sort(np.frombuffer(totals.task_ids, dtype=np.int64))
    repeated = ids[1:][ids[1:] == ids[:-1]]
    result.tasks_held_twice = len(np.unique(repeated))
    result.msb_free = {
        msb: (1 - cpu_used / max(cpu, 1), 1 - memory_used / max(memory, 1))
        for msb, (cpu, cpu_used, memory, memory_used) in sorted(totals.msb.items())
    }
    result.quota_violations = await _quota_violations(store, revision, totals)
    return result


async def _paged(store: Store, prefix: str, revision: int) -> AsyncIterator[tuple[str, Any]]:
    """(key after the prefix, JSON value) of every key under `prefix`, in key order."""
    start_after = None
    while True:
        page = await store.range(prefix, start_after=start_after, limit=PAGE, revision=revision)
        for kv in page.kvs:
            yield kv.key[len(prefix) :], json.loads(kv.value)
        if not page.more or not page.kvs:
            return
        start_after = page.kvs[-1].key


async def _machine_allocations(
    store: Store, revision: int
) -> AsyncIterator[tuple[str, _Allocation]]:
    """Per machine in id order: its allocation record (empty if missing) and entries."""
    current: tuple[str, _Allocation] | None = None
    async for name, value in _paged(store, keys.ALLOCATIONS, revision):
        machine_id, _, task_id = name.partition("/")
        if current is not None and current[0] != machine_id:
            yield current
            current = None
        if current is None:
            current = (machine_id, _Allocation())
        if task_id:
            current[1].entries[task_id] = value
        else:
            current[1].record = value
    if current is not None:
        yield current


def _amounts(resources: dict[str, Any]) -> Counter[str]:
    amounts = Counter({label: int(resources.get(name, 0)) for name, label in LABELS})
    amounts.update({f"extra/{k}": int(v) for k, v in resources.get("extra", {}).items()})
    return amounts


def _visit(
    result: Audit, totals: _Totals, machine: dict[str, Any] | None, allocation: _Allocation
) -> None:
    """One machine (None: allocations without a machine record) and its allocations."""
    used: Counter[str] = Counter()
    for task_id, resources in allocation.entries.items():
        amounts = _amounts(resources)
        used.update(amounts)
        job, _, index = task_id.rpartition("/")
        totals.used.setdefault(job.split("/", 1)[0], Counter()).update(amounts)
        number = totals.job_numbers.setdefault(job, len(totals.job_numbers))
        totals.task_ids.append(number << INDEX_BITS | int(index))
        result.tasks += 1
    owner = allocation.record.get("entitlement")
    if machine is None:
        return
    result.machines += 1
    if owner is not None:
        result.owned_machines += 1
        totals.owned.setdefault(owner, Counter())[machine["hardware_type"]] += 1
    capacity = _amounts(machine["capacity"])
    if any(amount > capacity[dimension] for dimension, amount in used.items()):
        result.overcommitted_machines += 1
    topology = machine["topology"]
    sums = totals.msb.setdefault(f"{topology['dc']}/{topology['msb']}", [0, 0, 0, 0])
    sums[0] += capacity["cpu"]
    sums[1] += used["cpu"]
    sums[2] += capacity["memory"]
    sums[3] += used["memory"]


async def _quota_violations(store: Store, revision: int, totals: _Totals) -> list[str]:
    violations = []
    listed = await store.range(keys.ENTITLEMENTS, revision=revision)
    entitlements = {
        e.name: e for e in (from_json(Entitlement, kv.value, stored=True) for kv in listed.kvs)
    }
    for name in sorted(totals.used.keys() | totals.owned.keys()):
        entitlement = entitlements.get(name)
        if entitlement is None:
            violations.append(f"{name}: holds resources but has no entitlement record")
            continue
        quota = Counter(entitlement.quota.resources.amounts())
        violations.extend(
            f"{name}: {dimension} {amount} over its quota of {quota[dimension]}"
            for dimension, amount in sorted(totals.used.get(name, Counter()).items())
            if amount > quota[dimension]
        )
        violations.extend(
            f"{name}: {count} {hardware} machines over its quota of "
            f"{entitlement.quota.machines[hardware]}"
            for hardware, count in sorted(totals.owned.get(name, Counter()).items())
            if hardware in entitlement.quota.machines
            and count > entitlement.quota.machines[hardware]
        )
    return violations
