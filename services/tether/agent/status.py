"""An attempt the agent runs, and the writes that report it in `task-status/`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import pydantic

from tether.agent.workdir import AttemptFiles, ShimState, TaskRef
from tether.model import TERMINAL_STATES, TaskState, TaskStatus, from_json, to_json
from tether.store import Get, KeyValue, Put, Store, key_exists, keys, mod_revision_is

_log = logging.getLogger(__name__)

STATUS_CAS_ATTEMPTS: Final = 5


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

    @property
    def task(self) -> TaskRef:
        return self.files.task

    @property
    def number(self) -> int:
        return self.files.attempt


class StatusWriter:
    """Writes the status of the machine's task attempts, remembering what it knows of each
    status key so that a write usually needs no read first."""

    def __init__(self, store: Store, machine_id: str) -> None:
        self._store = store
        self._machine_id = machine_id
        self._known: dict[str, _StoredStatus] = {}
        """What the agent knows of the status keys of its tasks, by key."""

    async def write(
        self, attempt: Attempt, state: TaskState, *, allow_create: bool, **fields: Any
    ) -> bool:
        """Writes the attempt's status unless the status key has moved on or the task is gone;
        returns whether the key now describes this attempt in `state`.

        `allow_create` lets the write replace a missing status or an older attempt's; without
        it the key must already describe this attempt (so that a status the scheduler deleted
        is not brought back). Nothing is written for a state already reported.

        Each write compares the key's revision with what the agent believes it to be: the
        status it wrote last, or for a new task a missing key. A wrong belief costs nothing
        extra, as the failed write reads the key in the same round trip; a decision not to
        write is only ever taken on a fresh read.
        """
        if attempt.reported is state and attempt.progress_reported == attempt.progress:
            return True
        task = attempt.task
        key = keys.task_status(task.entitlement, task.job, task.index)
        message = fields.get("message", "")
        stored = self._known.get(key)
        fresh = stored is None and not allow_create
        if stored is None:
            stored = _read_status(await self._store.get(key)) if fresh else _StoredStatus(0)
        for _ in range(STATUS_CAS_ATTEMPTS):
            same = (
                stored.attempt,
                stored.machine,
                stored.state,
                stored.message,
                stored.progress,
            ) == (attempt.number, self._machine_id, state, message, attempt.progress)
            if same or not self._may_write(stored, attempt.number, allow_create):
                if not fresh:
                    stored, fresh = _read_status(await self._store.get(key)), True
                    continue
                # Written already, or not ours to write (another attempt's now): either way,
                # nothing to try again for these steps.
                attempt.reported, attempt.progress_reported = state, attempt.progress
                return same
            shim_state = attempt.state
            status = TaskStatus(
                job=f"{task.entitlement}/{task.job}",
                index=task.index,
                machine=self._machine_id,
                attempt=attempt.number,
                state=state,
                pid=shim_state.pid if shim_state else None,
                limits=shim_state.limits if shim_state else "",
                started_at=shim_state.started_at if shim_state else None,
                progress=attempt.progress,
                updated_at=datetime.now(UTC),
                **fields,
            )
            # The task's record must still exist: the scheduler deletes it with its status in
            # one transaction, and a status written after that would outlive the task.
            task_key = keys.task(task.entitlement, task.job, task.index)
            result = await self._store.txn(
                [mod_revision_is(key, stored.mod_revision), key_exists(task_key)],
                [Put(key, to_json(status))],
                [Get(key), Get(task_key)],
            )
            if result.succeeded:
                self._known[key] = _StoredStatus(
                    result.revision,
                    attempt.number,
                    self._machine_id,
                    state,
                    message,
                    status.progress,
                )
                attempt.reported, attempt.progress_reported = state, status.progress
                return True
            if not result.kvs(1):
                return False  # the task is gone: nothing to report, nothing to start
            stored, fresh = _read_status(result.kv(0)), True
        _log.warning("status of %s kept changing; will report %s later", task.task_id, state)
        return False

    def _may_write(self, current: _StoredStatus, attempt: int, allow_create: bool) -> bool:
        if current.attempt != attempt or current.machine != self._machine_id:
            return allow_create and (current.attempt is None or current.attempt < attempt)
        return current.state not in TERMINAL_STATES

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
