"""An attempt the agent runs, and the writes that report it in `task-status/`."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import pydantic

from tether.agent.workdir import AttemptFiles, ShimState, TaskRef
from tether.model import TERMINAL_STATES, TaskState, TaskStatus, from_json, to_json
from tether.store import Compare, Get, KeyValue, Put, Store, key_exists, keys, mod_revision_is

_log = logging.getLogger(__name__)

STATUS_CAS_ATTEMPTS: Final = 5
BATCH_REPORTS: Final = 64
"""Reports written in one transaction at most: two compares each, within etcd's default limit
of 128 operations per transaction."""


@dataclass(eq=False)
class Attempt:
    """One attempt this agent runs (or adopted), until its end has been reported."""

    files: AttemptFiles
    seen_at: float
    """Monotonic time of the launch or adoption."""
    state: ShimState | None = None
    reported: TaskState | None = None
    stop_sent_at: float | None = None
    progress: float | None = None
    """The steps the task last reported (at first, those its assignment resumes from)."""
    progress_read_at: float = 0.0
    """Monotonic time the executor was last asked for them."""
    progress_reported: float | None = None
    adopted: bool = False
    """Left by a previous agent, rather than launched by this one."""

    @property
    def task(self) -> TaskRef:
        return self.files.task

    @property
    def number(self) -> int:
        return self.files.attempt


@dataclass(frozen=True)
class StatusReport:
    """A status to write for one attempt: its state and the other fields of `TaskStatus`.

    `allow_create` lets the write replace a missing status or an older attempt's; without it
    the key must already describe this attempt (so that a status the scheduler deleted is not
    brought back)."""

    attempt: Attempt
    state: TaskState
    allow_create: bool
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        task = self.attempt.task
        return keys.task_status(task.entitlement, task.job, task.index)

    @property
    def message(self) -> str:
        return str(self.fields.get("message", ""))

    @property
    def done(self) -> bool:
        """Whether this state and progress are what was last reported for the attempt."""
        attempt = self.attempt
        return attempt.reported is self.state and attempt.progress_reported == attempt.progress


class StatusWriter:
    """Writes the status of the machine's task attempts, remembering what it knows of each
    status key so that a write usually needs no read first, and writing what one pass of the
    agent reports in one transaction."""

    def __init__(self, store: Store, machine_id: str) -> None:
        self._store = store
        self._machine_id = machine_id
        self._known: dict[str, _StoredStatus] = {}
        """What the agent knows of the status keys of its tasks, by key."""

    async def write_all(self, reports: Sequence[StatusReport]) -> list[bool]:
        """Writes each report unless its status key has moved on or its task is gone, in
        order; returns, per report, whether the key now describes its attempt in its state.
        Nothing is written for a state already reported.

        The reports whose keys the agent believes it knows go in one transaction (in chunks
        of `BATCH_REPORTS`); should any key have moved on, each is written on its own. A
        report that needs a fresh read first, or names a key an earlier report names, is
        written on its own after the batch, which keeps each key's reports in order."""
        results = [report.done for report in reports]
        batch: list[tuple[int, StatusReport, _StoredStatus]] = []
        alone: list[int] = []
        named: set[str] = set()
        for number, report in enumerate(reports):
            if results[number]:
                continue
            key = report.key
            stored = self._known.get(key)
            if stored is None and report.allow_create:
                stored = _StoredStatus(0)
            if key in named or stored is None or not self._writes(stored, report):
                alone.append(number)
            else:
                batch.append((number, report, stored))
            named.add(key)
        for start in range(0, len(batch), BATCH_REPORTS):
            chunk = batch[start : start + BATCH_REPORTS]
            if await self._write_batch([(report, stored) for _, report, stored in chunk]):
                for number, _, _ in chunk:
                    results[number] = True
            else:
                alone[:0] = [number for number, _, _ in chunk]
        for number in sorted(alone):
            results[number] = await self._write_one(reports[number])
        return results

    async def _write_batch(self, reports: Sequence[tuple[StatusReport, _StoredStatus]]) -> bool:
        """Writes every report in one transaction if every key is as believed; returns whether
        it did."""
        compares: list[Compare] = []
        puts: list[Put] = []
        for report, stored in reports:
            status = self._status(report)
            compares += self._preconditions(report, stored)
            puts.append(Put(report.key, to_json(status)))
        result = await self._store.txn(compares, puts)
        if result.succeeded:
            for report, _ in reports:
                self._wrote(report, result.revision)
        return result.succeeded

    async def _write_one(self, report: StatusReport) -> bool:
        """Writes one report, reading the key when what is known of it will not do.

        Each write compares the key's revision with what the agent believes it to be: the
        status it wrote last, or for a new task a missing key. A wrong belief costs nothing
        extra, as the failed write reads the key in the same round trip; a decision not to
        write is only ever taken on a fresh read."""
        key = report.key
        stored = self._known.get(key)
        fresh = stored is None and not report.allow_create
        if stored is None:
            stored = _read_status(await self._store.get(key)) if fresh else _StoredStatus(0)
        for _ in range(STATUS_CAS_ATTEMPTS):
            if not self._writes(stored, report):
                if not fresh:
                    stored, fresh = _read_status(await self._store.get(key)), True
                    continue
                # Written already, or not ours to write (another attempt's now): either way,
                # nothing to try again for these steps.
                attempt = report.attempt
                attempt.reported, attempt.progress_reported = report.state, attempt.progress
                return self._same(stored, report)
            status = self._status(report)
            task = report.attempt.task
            task_key = keys.task(task.entitlement, task.job, task.index)
            result = await self._store.txn(
                self._preconditions(report, stored),
                [Put(key, to_json(status))],
                [Get(key), Get(task_key)],
            )
            if result.succeeded:
                self._wrote(report, result.revision)
                return True
            if not result.kvs(1):
                return False  # the task is gone: nothing to report, nothing to start
            stored, fresh = _read_status(result.kv(0)), True
        _log.warning(
            "status of %s kept changing; will report %s later",
            report.attempt.task.task_id,
            report.state,
        )
        return False

    def _writes(self, stored: _StoredStatus, report: StatusReport) -> bool:
        """Whether a key holding `stored` takes the report: not the same status already, and
        not another attempt's or a finished one."""
        if self._same(stored, report):
            return False
        attempt = report.attempt.number
        if stored.attempt != attempt or stored.machine != self._machine_id:
            return report.allow_create and (stored.attempt is None or stored.attempt < attempt)
        return stored.state not in TERMINAL_STATES

    def _same(self, stored: _StoredStatus, report: StatusReport) -> bool:
        attempt = report.attempt
        return (stored.attempt, stored.machine, stored.state, stored.message, stored.progress) == (
            attempt.number,
            self._machine_id,
            report.state,
            report.message,
            attempt.progress,
        )

    @staticmethod
    def _preconditions(report: StatusReport, stored: _StoredStatus) -> list[Compare]:
        # The task's record must still exist: the scheduler deletes it with its status in
        # one transaction, and a status written after that would outlive the task.
        task = report.attempt.task
        return [
            mod_revision_is(report.key, stored.mod_revision),
            key_exists(keys.task(task.entitlement, task.job, task.index)),
        ]

    def _status(self, report: StatusReport) -> TaskStatus:
        attempt, task = report.attempt, report.attempt.task
        shim_state = attempt.state
        return TaskStatus(
            job=f"{task.entitlement}/{task.job}",
            index=task.index,
            machine=self._machine_id,
            attempt=attempt.number,
            state=report.state,
            pid=shim_state.pid if shim_state else None,
            limits=shim_state.limits if shim_state else "",
            started_at=shim_state.started_at if shim_state else None,
            progress=attempt.progress,
            updated_at=datetime.now(UTC),
            **report.fields,
        )

    def _wrote(self, report: StatusReport, revision: int) -> None:
        attempt = report.attempt
        self._known[report.key] = _StoredStatus(
            revision,
            attempt.number,
            self._machine_id,
            report.state,
            report.message,
            attempt.progress,
        )
        attempt.reported, attempt.progress_reported = report.state, attempt.progress

    def forget(self, task: TaskRef) -> None:
        """Drops what is known of the task's status (if it comes back, the first write reads
        the key)."""
        self._known.pop(keys.task_status(task.entitlement, task.job, task.index), None)


@dataclass(frozen=True, slots=True)
class _StoredStatus:
    """What deciding to write a task's status needs of the stored one: the key's mod revision
    (0: missing) and, when it holds a valid status, that status's identity and state."""

    mod_revision: int
    attempt: int | None = None
    machine: str = ""
    state: TaskState | None = None
    message: str = ""
    progress: float | None = None


def _read_status(kv: KeyValue | None) -> _StoredStatus:
    if kv is None:
        return _StoredStatus(0)
    try:
        status = from_json(TaskStatus, kv.value, stored=True)
    except pydantic.ValidationError as error:
        _log.warning("replacing malformed status %s: %s", kv.key, error)
        return _StoredStatus(kv.mod_revision)
    return _StoredStatus(
        kv.mod_revision,
        status.attempt,
        status.machine,
        status.state,
        status.message,
        status.progress,
    )
