"""Keeps a harvest machine's notices in the store (`harvest.harvest_notices`): reads what its
tasks hold and their jobs' priorities, and writes only what changed."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pydantic

from tether import metrics
from tether.broker.harvest import harvest_notices
from tether.model import (
    AdvanceNotice,
    Job,
    Machine,
    MaintenanceKind,
    Resources,
    drain_id,
    from_json,
    to_json,
)
from tether.store import Compare, Delete, Get, Op, Put, Store, key_missing, keys, mod_revision_is
from tether.store.mirror import PrefixMirror

_log = logging.getLogger(__name__)


class HarvestNotices:
    """Writes the eviction and shrink notices a harvest machine's report calls for; a shrink's
    tasks get `notice_s` to move."""

    def __init__(self, store: Store, notices: PrefixMirror, notice_s: float) -> None:
        self._store = store
        self._notices = notices
        self._notice_s = notice_s

    async def apply(self, machine: Machine) -> None:
        """Brings the machine's harvest notices in line with its report (a regular machine
        without any costs no read)."""
        existing = self._existing(machine.id)
        if machine.harvest is None and not existing:
            return
        held, priorities = await self._tasks_of(machine.id) if machine.harvest else ({}, {})
        now = datetime.now(UTC)
        wanted = harvest_notices(
            machine, held, priorities, {i: n for i, (n, _) in existing.items()}, now, self._notice_s
        )
        for notice_id, notice in wanted.items():
            stored = existing.get(notice_id)
            if (stored[0] if stored else None) == notice:
                continue
            key = keys.maintenance(notice_id)
            guard: Compare = mod_revision_is(key, stored[1]) if stored else key_missing(key)
            op: Op = Delete(key) if notice is None else Put(key, to_json(notice))
            result = await self._store.txn([guard], [op])
            if not result.succeeded:
                continue  # someone else wrote it: the next report decides again
            if notice is None:
                _log.info("machine %s: %s notice withdrawn", machine.id, notice_id)
                continue
            metrics.BROKER_HARVEST_NOTICES.labels(notice.kind.value).inc()
            if notice.kind is MaintenanceKind.HARVEST_SHRINK:
                metrics.BROKER_HARVEST_DISPLACED.inc(len(notice.tasks))
            _log.info(
                "machine %s: %s notice, due %s%s",
                machine.id,
                notice.kind.value,
                notice.start.isoformat(),
                f", moving {', '.join(notice.tasks)}" if notice.tasks else "",
            )

    def _existing(self, machine_id: str) -> dict[str, tuple[AdvanceNotice, int]]:
        """The machine's harvest notices in the mirror, with their mod revisions."""
        found = {}
        for kind in (MaintenanceKind.HARVEST_SHRINK, MaintenanceKind.EVICTION):
            notice_id = drain_id(kind, machine_id)
            kv = self._notices.items.get(keys.maintenance(notice_id))
            if kv is None:
                continue
            try:
                found[notice_id] = (
                    from_json(AdvanceNotice, kv.value, stored=True),
                    kv.mod_revision,
                )
            except pydantic.ValidationError as error:
                _log.error("replacing malformed notice %s: %s", notice_id, error)
        return found

    async def _tasks_of(self, machine_id: str) -> tuple[dict[str, Resources], dict[str, int]]:
        """What each task on the machine holds, and the priority of each of their jobs."""
        prefix = keys.allocation_entries(machine_id)
        entries = (await self._store.range(prefix)).kvs
        held: dict[str, Resources] = {}
        for kv in entries:
            try:
                held[kv.key[len(prefix) :]] = from_json(Resources, kv.value, stored=True)
            except pydantic.ValidationError as error:
                _log.error("machine %s: skipping malformed entry %s: %s", machine_id, kv.key, error)
        handles = sorted({task.rsplit("/", 1)[0] for task in held})
        priorities: dict[str, int] = {}
        if handles:
            reads = [Get(keys.job(*handle.split("/", 1))) for handle in handles]
            result = await self._store.txn([], reads)
            for position, handle in enumerate(handles):
                job = result.kv(position)
                if job is not None:
                    priorities[handle] = _priority(job.value, handle)
        return held, priorities


def _priority(value: bytes, handle: str) -> int:
    try:
        return from_json(Job, value, stored=True).spec.priority
    except pydantic.ValidationError as error:
        _log.error("job %s: malformed record, counted at priority 0: %s", handle, error)
        return 0
