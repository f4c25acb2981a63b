"""The agent process: runs its machine's assignments through an executor and reports them."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import pydantic

from tether import metrics
from tether.agent.executor import Executor, ProcessExecutor
from tether.agent.logserver import log_server
from tether.agent.profile import HostProfiles
from tether.agent.settings import AgentSettings
from tether.agent.status import Attempt, StatusWriter
from tether.agent.workdir import AttemptFiles, ShimExit, TaskRef, WorkDir
from tether.aio import cancel_and_wait, every
from tether.model import (
    AgentHeartbeat,
    Assignment,
    DesiredState,
    Machine,
    TaskState,
    from_json,
    to_json,
)
from tether.service import RegionError, Service, read_region
from tether.store import (
    KeyValue,
    Store,
    StoreError,
    keys,
)
from tether.store.lease import LeaseKeeper
from tether.store.mirror import PrefixMirror

_log = logging.getLogger(__name__)

RETRY_S: Final = 0.5
"""Pause before registering again after the store failed."""
KILL_BACKSTOP_S: Final = 5.0
"""Extra time, after the shim's own SIGKILL, before the agent kills an unresponsive shim."""


class Agent(Service):
    """Runs what `assignments/<machine>/` asks for and reports it in `task-status/`, once the
    machine carries the host profile its allocation record asks for.

    The executor runs the attempts: by default real processes (`ProcessExecutor`). Those are
    not children of the agent in any way that matters: each runs under a shim in its own
    session, so `stop()` (or a crash) leaves them running, and the next agent on the same work
    dir adopts them. The agent closes `store` on `stop()` when it `owns_store`.
    """

    def __init__(
        self,
        machine: Machine,
        settings: AgentSettings,
        store: Store,
        *,
        executor: Executor | None = None,
        owns_store: bool = True,
    ) -> None:
        self.name = f"agent {machine.id}"
        self.machine = machine
        self._settings = settings
        self._store = store
        self._owns_store = owns_store
        self.work_dir = WorkDir(settings.work_dir or Path(".tether/agents") / machine.id)
        self._executor = executor or ProcessExecutor(self.work_dir, settings, machine.id)
        self._poll_interval_s = self._executor.poll_interval_s or settings.poll_interval_s
        logs = self._executor.logs
        self._http = (
            None if logs is None else log_server(logs, settings.http_host, settings.http_port)
        )
        self._assignments = PrefixMirror(
            store, keys.assignments_of(machine.id), self._assignments_changed
        )
        self._profiles = HostProfiles(
            store, machine.id, settings, self.work_dir.host_profile, self._profile_switched
        )
        self._keeper: LeaseKeeper | None = None
        self._fencing_s = 0.0
        """The region's fencing period, read at the start."""
        self._held: set[AttemptFiles] = set()
        """The at-most-once attempts the fence lets run."""
        self._fence_lease = 0
        """The lease whose renewals extend the fence: the current one, once the attempts it
        holds were checked against the store after its heartbeat was put."""
        self._fence_until = 0.0
        self._desired: dict[TaskRef, Assignment] = {}
        """The valid assignments of this machine, by task, as of the mirror."""
        self._attempts: dict[TaskRef, dict[int, Attempt]] = {}
        self._known: set[tuple[TaskRef, int]] = set()
        """Attempts that were started (or reported as never started) here: never start again."""
        self._status = StatusWriter(store, machine.id)
        self._waiting: dict[TaskRef, tuple[int, str]] = {}
        """The attempt and message last reported for tasks waiting for a host profile switch."""
        self._wake = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self.address = ""

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        # The host profile's record lives in the work dir, whatever the executor keeps there.
        self.work_dir.root.mkdir(parents=True, exist_ok=True)
        self._executor.bind(self._wake.set)
        self._executor.prepare()
        if self._http is None:
            # A heartbeat must name an address; the frontend's log proxy reports this one
            # unreachable, which is the truth: there are no logs.
            self.address = f"nologs://{self.machine.hostname}"
        else:
            await self._http.start()
            host = self._settings.http_host
            advertised = self.machine.hostname if host in ("0.0.0.0", "::") else host
            self.address = f"http://{advertised}:{self._http.port}"
        self._started_at = datetime.now(UTC)
        self.machine = _with_profile(self.machine, self._profiles.load())
        self._fencing_s = (await read_region(self._store)).fencing_s
        if self._fencing_s < self._settings.lease_ttl_s:
            raise RegionError(
                f"the region's fencing period ({self._fencing_s}s) is shorter than this "
                f"agent's lease TTL (TETHER_AGENT_LEASE_TTL_S={self._settings.lease_ttl_s}s): "
                "at-most-once tasks would be killed between renewals"
            )
        await self._register()
        self._adopt()
        # Before the assignments: the first pass already knows whether tasks must wait.
        await self._profiles.start()
        # Listed after the heartbeat was put: the fence may hold what it still assigns.
        await self._assignments.start()
        self._update_desired(self._assignments.items)
        self._hold_assigned(self._desired)
        self._workers = [
            asyncio.create_task(self._stay_registered(), name=f"{self.name} heartbeat"),
            asyncio.create_task(
                every(self._poll_interval_s, self._reconcile_now, wake=self._wake),
                name=f"{self.name} reconcile",
            ),
        ]

    async def stop(self) -> None:
        """Stops watching, serving and heartbeating; the tasks keep running."""
        await cancel_and_wait(*self._workers)
        self._workers = []
        await self._assignments.stop()
        await self._profiles.stop()
        if self._keeper is not None:
            await self._keeper.stop(revoke=True)
        if self._http is not None:
            await self._http.stop()
        if self._owns_store:
            await self._store.close()

    # --- heartbeat ---------------------------------------------------------------------------

    async def _register(self) -> None:
        """Grants a lease and puts the heartbeat on it."""
        keeper = LeaseKeeper(self._store, self._settings.lease_ttl_s, self._lease_renewed)
        lease = await keeper.start()
        try:
            await self._put_heartbeat(lease)
        except BaseException:
            await keeper.stop(revoke=True)
            raise
        self._keeper = keeper

    async def _put_heartbeat(self, lease: int) -> None:
        heartbeat = AgentHeartbeat(
            machine=self.machine, address=self.address, pid=os.getpid(), started_at=self._started_at
        )
        await self._store.put(keys.heartbeat(self.machine.id), to_json(heartbeat), lease=lease)

    async def _stay_registered(self) -> None:
        while True:
            assert self._keeper is not None
            await self._keeper.lost.wait()
            _log.warning("heartbeat lease lost; registering again")
            await self._keeper.stop(revoke=False)
            while True:
                try:
                    await self._register()
                    break
                except StoreError as error:
                    _log.warning("cannot register: %s; retrying", error)
                    await asyncio.sleep(RETRY_S)
            while True:
                try:
                    listing = await self._store.range(keys.assignments_of(self.machine.id))
                    break
                except StoreError as error:
                    _log.warning("cannot read the assignments: %s; retrying", error)
                    await asyncio.sleep(RETRY_S)
            assigned = (self._assignment_of(kv.key, kv) for kv in listing.kvs)
            self._hold_assigned(dict(pair for pair in assigned if pair is not None))

    # --- the fence of at-most-once attempts --------------------------------------------------

    def _hold_assigned(self, assigned: dict[TaskRef, Assignment]) -> None:
        """Under the lease just registered, holds the at-most-once attempts that `assigned`
        (read after the heartbeat was put) still names, and lets go of the others.

        From the moment a machine's heartbeat is gone, the scheduler may take its at-most-once
        tasks elsewhere once the fencing period is over, and only while the heartbeat stays
        gone. An attempt still assigned after the new heartbeat was put is therefore still
        this machine's; one that is not may already run elsewhere, and its shim kills it.
        """
        keeper = self._keeper
        assert keeper is not None
        self._held = {
            attempt.files
            for task, attempts in self._attempts.items()
            for attempt in attempts.values()
            if (assignment := assigned.get(task)) is not None
            and assignment.at_most_once
            and assignment.attempt == attempt.number
        }
        self._fence_lease = keeper.lease
        self._fence_until = keeper.renewed_at + self._fencing_s
        self._write_fence()

    def _lease_renewed(self, lease: int, renewed_at: float) -> None:
        if lease == self._fence_lease:
            self._fence_until = renewed_at + self._fencing_s
            # A fence that holds nothing needs no new deadline: it is written again as soon as
            # it holds an attempt (`_launch`, `_hold_assigned`).
            if self._held:
                self._write_fence()

    def _fence_is_current(self) -> bool:
        """Whether new at-most-once attempts may start: the fence follows a live lease."""
        keeper = self._keeper
        return keeper is not None and not keeper.lost.is_set() and keeper.lease == self._fence_lease

    def _write_fence(self) -> None:
        try:
            self._executor.fence(self._held, self._fence_until)
        except OSError as error:
            # The fence then expires on its own: at-most-once tasks stop, nothing runs twice.
            _log.error("cannot write the fence of at-most-once tasks: %s", error)

    async def _profile_switched(self, profile: str) -> None:
        """Starts the tasks that waited, and announces the new profile in the heartbeat."""
        self.machine = _with_profile(self.machine, profile)
        self._wake.set()
        while True:
            keeper = self._keeper
            assert keeper is not None
            try:
                await self._put_heartbeat(keeper.lease)
                return
            except StoreError as error:
                if keeper.lost.is_set():
                    return  # registering again puts the heartbeat with the new profile
                _log.warning("cannot announce host profile %s: %s; retrying", profile, error)
                await asyncio.sleep(RETRY_S)

    # --- assignments -------------------------------------------------------------------------

    async def _assignments_changed(self, changed: set[str]) -> None:
        # Only bookkeeping and a wake-up: the mirror's watch must not wait for (or fail with) our
        # work.
        self._update_desired(changed)
        self._wake.set()

    def _update_desired(self, changed: Iterable[str]) -> None:
        """Updates the desired assignments of the changed keys; malformed ones are logged (once
        per change) and left out."""
        for key in changed:
            kv = self._assignments.items.get(key)
            found = self._assignment_of(key, kv)
            if found is not None:
                self._desired[found[0]] = found[1]
                continue
            task = self._task_of(key)
            if task is not None:
                self._desired.pop(task, None)
                self._forget_status(task)

    def _assignment_of(self, key: str, kv: KeyValue | None) -> tuple[TaskRef, Assignment] | None:
        """The task and assignment stored at `key`; None when there is none, or when the key
        or the value is malformed (logged)."""
        task = self._task_of(key)
        if task is None:
            if kv is not None:
                _log.warning("ignoring assignment with a malformed key %r", key)
            return None
        assignment = None if kv is None else _parse_assignment(kv, task)
        return None if assignment is None else (task, assignment)

    def _task_of(self, key: str) -> TaskRef | None:
        """The task an assignment key of this machine names; None when the key is not one that
        `keys.assignment` makes."""
        try:
            task = TaskRef(*keys.task_of_key(key))
            canonical = keys.assignment(self.machine.id, task.entitlement, task.job, task.index)
        except ValueError:
            return None
        return task if key == canonical else None

    # --- reconciling -------------------------------------------------------------------------

    async def _reconcile_now(self) -> None:
        """One pass, run every poll interval or as soon as something wakes it."""
        try:
            await self._reconcile()
        except StoreError as error:
            _log.warning("store request failed, retrying: %s", error)
        except Exception:
            _log.exception("reconciling failed; retrying")

    async def _reconcile(self) -> None:
        # A copy: the mirror's callback updates the assignments while this awaits the store.
        desired = dict(self._desired)
        for task, attempts in list(self._attempts.items()):
            for attempt in list(attempts.values()):
                await self._observe(attempt, desired.get(task))
        new = [(t, a) for t, a in desired.items() if (t, a.attempt) not in self._known]
        to_start = {task for task, a in new if a.desired is DesiredState.RUNNING}
        waiting = await self._profiles.blocking() if to_start else None
        # Forget what was reported for tasks that no longer wait (started, stopped, gone).
        self._waiting = {
            task: reported
            for task, reported in self._waiting.items()
            if waiting is not None and task in to_start
        }
        for task, assignment in new:
            if task not in to_start:
                await self._report_never_started(task, assignment)
            elif waiting is not None:
                await self._report_waiting(task, assignment, waiting)
            elif not assignment.at_most_once:
                await self._launch(task, assignment)
            elif task not in self._attempts and self._fence_is_current():
                # Only once the task's older attempt here has ended, and only under a fence
                # that a live lease extends.
                await self._launch(task, assignment)

    def _adopt(self) -> None:
        """Takes over the attempts a previous agent left (in the work dir)."""
        found = self._executor.leftovers()
        latest: dict[TaskRef, int] = {}
        for leftover in found:
            files = leftover.files
            self._known.add((files.task, files.attempt))
            latest[files.task] = max(files.attempt, latest.get(files.task, 0))
        now = time.monotonic()
        for leftover in found:
            files = leftover.files
            # Older attempts that finished were reported when they did; one that never ran
            # never will. The latest attempt's end may still need reporting.
            if files.attempt != latest[files.task] and leftover.settled:
                continue
            self._attempts.setdefault(files.task, {})[files.attempt] = Attempt(files, now)
            _log.info("adopting attempt %d of task %s", files.attempt, files.task.task_id)

    async def _observe(self, attempt: Attempt, assignment: Assignment | None) -> None:
        """Notices the attempt's start and end, and stops it when it is no longer wanted."""
        files = attempt.files
        end = self._executor.end(files)
        if attempt.state is None or attempt.state.pid is None:
            # Read after the end, which the shim writes last: a finished attempt's state is
            # final. This is the observation's only read of the state.
            attempt.state = self._executor.state(files) or attempt.state
        if end is not None:
            await self._finished(attempt, end)
            return
        shim_running = self._executor.supervised(files, attempt.state, attempt.seen_at)
        wanted = (
            assignment is not None
            and assignment.attempt == attempt.number
            and assignment.desired is DesiredState.RUNNING
        )
        if not wanted:
            self._stop(attempt)
        if not shim_running:
            await self._shim_died(attempt)
        elif attempt.state is not None and attempt.state.pid is not None:
            if attempt.progress is None and wanted and assignment is not None:
                attempt.progress = assignment.progress  # adopted: resumed from there
            if time.monotonic() - attempt.progress_read_at >= self._settings.progress_interval_s:
                self._read_progress(attempt)
            await self._status.write(attempt, TaskState.RUNNING, allow_create=True)

    def _stop(self, attempt: Attempt) -> None:
        """Asks the shim to stop the task; kills both when the shim does not manage to."""
        now = time.monotonic()
        if attempt.stop_sent_at is None:
            attempt.stop_sent_at = now
            _log.info("stopping attempt %d of task %s", attempt.number, attempt.task.task_id)
            self._executor.stop(attempt.files, attempt.state, force=False)
        elif now - attempt.stop_sent_at > self._settings.kill_grace_s + KILL_BACKSTOP_S:
            self._executor.stop(attempt.files, attempt.state, force=True)

    async def _shim_died(self, attempt: Attempt) -> None:
        # The shim records the end before it exits: look again, it may have just done so.
        end = self._executor.end(attempt.files)
        if end is None:
            self._executor.orphaned(attempt.state)
            end = ShimExit(
                exit_code=None,
                stopped=attempt.stop_sent_at is not None,
                finished_at=datetime.now(UTC),
                message="the task's supervisor (shim) ended without recording the exit status",
            )
            self._executor.record_end(attempt.files, end)
        await self._finished(attempt, end)

    def _read_progress(self, attempt: Attempt) -> None:
        """The steps the task reports now, if it reports any."""
        reported = self._executor.progress(attempt.files)
        if reported is not None:
            attempt.progress = reported
        attempt.progress_read_at = time.monotonic()

    async def _finished(self, attempt: Attempt, end: ShimExit) -> None:
        self._read_progress(attempt)
        if end.stopped or attempt.stop_sent_at is not None:
            state = TaskState.KILLED
        elif end.exit_code == 0:
            state = TaskState.EXITED
        else:
            state = TaskState.FAILED
        await self._status.write(
            attempt,
            state,
            allow_create=False,
            exit_code=end.exit_code,
            finished_at=end.finished_at,
            message=end.message,
        )
        metrics.AGENT_TASKS_EXITED.labels(state.value).inc()
        self._held.discard(attempt.files)
        task_attempts = self._attempts[attempt.task]
        del task_attempts[attempt.number]
        if not task_attempts:
            del self._attempts[attempt.task]
        self._executor.release(attempt.files, self._settings.keep_attempts, set(task_attempts))
        self._forget_status(attempt.task)

    # --- starting ----------------------------------------------------------------------------

    async def _launch(self, task: TaskRef, assignment: Assignment) -> None:
        attempt = self._attempt(task, assignment)
        if not await self._status.write(attempt, TaskState.STARTING, allow_create=True):
            # The status already describes a newer attempt, or the task is gone: this
            # assignment is stale.
            return
        self._known.add((task, assignment.attempt))
        self._attempts.setdefault(task, {})[assignment.attempt] = attempt
        _log.info("starting attempt %d of task %s", assignment.attempt, task.task_id)
        if assignment.at_most_once:
            self._held.add(attempt.files)
            self._write_fence()
        try:
            self._executor.launch(attempt.files, assignment, self._environment(task, assignment))
        except OSError as error:
            _log.warning("cannot start attempt %d of %s: %s", assignment.attempt, task, error)
            end = ShimExit(
                exit_code=None,
                finished_at=datetime.now(UTC),
                message=f"the agent could not start the task: {error}",
            )
            self._executor.record_end(attempt.files, end)
        else:
            metrics.AGENT_TASKS_STARTED.inc()

    def _environment(self, task: TaskRef, assignment: Assignment) -> dict[str, str]:
        """The template's variables and Tether's own (the executor adds the basics)."""
        return {
            **assignment.template.env,
            "TETHER_JOB": assignment.job,
            "TETHER_TASK_INDEX": str(task.index),
            "TETHER_TASK_ID": task.task_id,
            "TETHER_TASK_ATTEMPT": str(assignment.attempt),
            "TETHER_MACHINE": self.machine.id,
            # Where its earlier attempts got to: a task that checkpoints resumes from there.
            "TETHER_PROGRESS": _steps(assignment.progress or 0.0),
        }

    def _attempt(self, task: TaskRef, assignment: Assignment) -> Attempt:
        """A new attempt of the assignment's, with the progress it resumes from."""
        files = self.work_dir.attempt(task, assignment.attempt)
        return Attempt(files, time.monotonic(), progress=assignment.progress)

    async def _report_waiting(self, task: TaskRef, assignment: Assignment, message: str) -> None:
        """A task that may not start before the host profile switch is `placed`, saying why."""
        if self._waiting.get(task) == (assignment.attempt, message):
            return
        attempt = self._attempt(task, assignment)
        await self._status.write(attempt, TaskState.PLACED, allow_create=True, message=message)
        self._waiting[task] = (assignment.attempt, message)

    async def _report_never_started(self, task: TaskRef, assignment: Assignment) -> None:
        """An attempt stopped before it ever ran here is `killed`, so the scheduler can let go."""
        attempt = self._attempt(task, assignment)
        await self._status.write(
            attempt,
            TaskState.KILLED,
            allow_create=True,
            finished_at=datetime.now(UTC),
            message="stopped before it started",
        )
        self._known.add((task, assignment.attempt))

    # --- status ------------------------------------------------------------------------------

    def _forget_status(self, task: TaskRef) -> None:
        """Drops what the agent knows of the task's status once it neither runs nor is wanted
        here (it may come back: then the first write reads the key)."""
        if task not in self._attempts and task not in self._desired:
            self._status.forget(task)


def _steps(steps: float) -> str:
    """Steps as a task reads them: an integer without a fraction."""
    return str(int(steps)) if steps.is_integer() else repr(steps)


def _with_profile(machine: Machine, profile: str | None) -> Machine:
    return Machine.model_validate({**dict(machine), "host_profile_current": profile})


def _parse_assignment(kv: KeyValue, task: TaskRef) -> Assignment | None:
    """The assignment in `kv`, stored under `task`'s key; None (logged) when it is malformed or
    names another task."""
    try:
        assignment = from_json(Assignment, kv.value, stored=True)
    except pydantic.ValidationError as error:
        _log.warning("ignoring malformed assignment %s: %s", kv.key, error)
        return None
    if assignment.task_id != task.task_id:
        _log.warning("ignoring assignment %s: it names task %s", kv.key, assignment.task_id)
        return None
    return assignment
