"""The agent process: runs its machine's assignments through an executor and reports them."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from tether import metrics
from tether.agent.assignments import SharedTemplates, assignment_at, task_at, task_environment
from tether.agent.executor import Executor, ProcessExecutor
from tether.agent.fence import AttemptFence
from tether.agent.harvest import harvest_at, replay
from tether.agent.logserver import log_server
from tether.agent.observer import NEVER_RAN, Observer
from tether.agent.profile import HostProfiles
from tether.agent.registration import Registration, retried
from tether.agent.settings import AgentSettings
from tether.agent.status import Attempt, StatusReport, StatusWriter
from tether.agent.workdir import ShimExit, TaskRef, WorkDir
from tether.aio import cancel_and_wait, every
from tether.model import (
    TERMINAL_STATES,
    AgentHeartbeat,
    Assignment,
    DesiredState,
    Machine,
    TaskState,
)
from tether.model.machine import HarvestStep
from tether.service import RegionError, Service, read_region
from tether.store import (
    Store,
    StoreError,
    keys,
)
from tether.store.mirror import PrefixMirror
from tether.tls import http_scheme

_log = logging.getLogger(__name__)

IDLE_PASS_S: Final = 60.0
"""How often a pass runs while the agent has no attempt to look at and no assignment to act
on. Such a pass does nothing: an assignment or a host profile that changes wakes it at once."""


class Agent(Service):
    """Runs what `assignments/<machine>/` asks for and reports it in `task-status/`, once the
    machine carries the host profile its allocation record asks for.

    The executor runs the attempts: by default real processes (`ProcessExecutor`). Those are
    not children of the agent in any way that matters: each runs under a shim in its own
    session, so `stop()` (or a crash) leaves them running, and the next agent on the same work
    dir adopts them. The agent closes `store` on `stop()` when it `owns_store`. Agents of one
    process may share `templates` (each otherwise keeps its own).
    """

    def __init__(
        self,
        machine: Machine,
        settings: AgentSettings,
        store: Store,
        *,
        executor: Executor | None = None,
        owns_store: bool = True,
        templates: SharedTemplates | None = None,
        harvest: Sequence[HarvestStep] = (),
    ) -> None:
        self.name = f"agent {machine.id}"
        self.machine = machine
        self._settings = settings
        self._store = store
        self._owns_store = owns_store
        self.work_dir = WorkDir(settings.work_dir or Path(".tether/agents") / machine.id)
        self._executor = executor or ProcessExecutor(self.work_dir, settings, machine.id)
        self._poll_interval_s = self._executor.poll_interval_s or settings.poll_interval_s
        self._observer = Observer(self._executor, settings)
        logs = self._executor.logs
        self._http = (
            None
            if logs is None
            else log_server(logs, settings.http_host, settings.http_port, settings.tls)
        )
        self._assignments = PrefixMirror(
            store, keys.assignments_of(machine.id), self._assignments_changed
        )
        self._profiles = HostProfiles(
            store, machine.id, settings, self.work_dir.host_profile, self._profile_switched
        )
        self._fence = AttemptFence(self._executor)
        self._registration = Registration(
            store, settings.lease_ttl_s, self._heartbeat, self._fence.renewed
        )
        self._templates = templates or SharedTemplates()
        self._harvest = list(harvest)
        """A harvest machine's capacity trace (none: a regular machine)."""
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
            self.address = f"{http_scheme(self._settings.tls)}://{advertised}:{self._http.port}"
        self._started_at = datetime.now(UTC)
        self.machine = _with_profile(self.machine, self._profiles.load())
        started = time.monotonic()
        if self._harvest:
            # A harvest machine from its first heartbeat: whole until the trace says otherwise.
            self.machine = harvest_at(self.machine, HarvestStep(at_s=0), self._started_at)
            while self._harvest and self._harvest[0].at_s == 0:
                self.machine = harvest_at(self.machine, self._harvest.pop(0), self._started_at)
        fencing_s = (await read_region(self._store)).fencing_s
        if fencing_s < self._settings.lease_ttl_s:
            raise RegionError(
                f"the region's fencing period ({fencing_s}s) is shorter than this "
                f"agent's lease TTL (TETHER_AGENT_LEASE_TTL_S={self._settings.lease_ttl_s}s): "
                "at-most-once tasks would be killed between renewals"
            )
        self._fence.fencing_s = fencing_s
        await self._registration.register()
        self._adopt()
        # Before the assignments: the first pass already knows whether tasks must wait.
        await self._profiles.start()
        # Listed after the heartbeat was put: the fence may hold what it still assigns.
        await self._assignments.start()
        self._update_desired(self._assignments.items)
        self._hold_assigned(self._desired)
        self._workers = [
            asyncio.create_task(
                self._registration.stay(self._registered_again), name=f"{self.name} heartbeat"
            ),
            asyncio.create_task(
                every(self._pause_s, self._reconcile_now, wake=self._wake),
                name=f"{self.name} reconcile",
            ),
        ]
        if self._harvest:
            self._workers.append(
                asyncio.create_task(
                    replay(self._harvest, started, self._harvest_changed),
                    name=f"{self.name} harvest trace",
                )
            )

    async def stop(self) -> None:
        """Stops watching, serving and heartbeating; the tasks keep running."""
        await cancel_and_wait(*self._workers)
        self._workers = []
        await self._assignments.stop()
        await self._profiles.stop()
        await self._registration.stop()
        if self._http is not None:
            await self._http.stop()
        self._executor.close()
        if self._owns_store:
            await self._store.close()

    # --- heartbeat ---------------------------------------------------------------------------

    def _heartbeat(self) -> AgentHeartbeat:
        return AgentHeartbeat(
            machine=self.machine, address=self.address, pid=os.getpid(), started_at=self._started_at
        )

    async def _harvest_changed(self, step: HarvestStep) -> None:
        """Announces the trace's next step: the broker moves what no longer fits."""
        self.machine = harvest_at(self.machine, step, datetime.now(UTC))
        await self._registration.announce()

    async def _registered_again(self) -> None:
        """After a new lease: the fence holds what the store still assigns here."""
        prefix = keys.assignments_of(self.machine.id)
        listing = await retried("read the assignments", lambda: self._store.range(prefix))
        assigned = (
            assignment_at(self.machine.id, kv.key, kv, self._templates) for kv in listing.kvs
        )
        self._hold_assigned(dict(pair for pair in assigned if pair is not None))

    # --- the fence of at-most-once attempts --------------------------------------------------

    def _hold_assigned(self, assigned: dict[TaskRef, Assignment]) -> None:
        """Under the lease just registered, holds the at-most-once attempts that `assigned`
        (read after the heartbeat was put) still names, and lets go of the others: one still
        assigned after the new heartbeat was put is still this machine's; one that is not may
        already run elsewhere, and its shim kills it."""
        assert self._registration.keeper is not None
        held = {
            attempt.files
            for task, attempts in self._attempts.items()
            for attempt in attempts.values()
            if (assignment := assigned.get(task)) is not None
            and assignment.at_most_once
            and assignment.attempt == attempt.number
        }
        self._fence.hold(held, self._registration.keeper)

    async def _profile_switched(self, profile: str) -> None:
        """Starts the tasks that waited, and announces the new profile in the heartbeat."""
        self.machine = _with_profile(self.machine, profile)
        self._wake.set()
        await self._registration.announce()

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
            found = assignment_at(
                self.machine.id, key, self._assignments.items.get(key), self._templates
            )
            if found is not None:
                self._desired[found[0]] = found[1]
                continue
            task = task_at(self.machine.id, key)
            if task is not None:
                self._desired.pop(task, None)
                self._forget_status(task)

    # --- reconciling -------------------------------------------------------------------------

    def _pause_s(self) -> float:
        """Until the next pass: the poll interval while there are attempts to look at (or
        assignments to act on), else IDLE_PASS_S."""
        return self._poll_interval_s if self._attempts or self._desired else IDLE_PASS_S

    async def _reconcile_now(self) -> None:
        """One pass, run every poll interval or as soon as something wakes it."""
        try:
            await self._reconcile()
        except StoreError as error:
            _log.warning("store request failed, retrying: %s", error)
        except Exception:
            _log.exception("reconciling failed; retrying")

    async def _reconcile(self) -> None:
        """Observes every attempt and claims the new assignments' status keys, writing both in
        one transaction (each a round trip, and each costing the store far more than its
        keys: one write a pass, not two); then lets go of the attempts whose end it reported
        (after the write: an end is never lost to a failed one) and starts those it claimed."""
        # A copy: the mirror's callback updates the assignments while this awaits the store.
        desired = dict(self._desired)
        reports = self._observe(desired)
        ended = [report for report in reports if report.state in TERMINAL_STATES]
        claims = await self._claims(desired, {report.attempt.task for report in ended})
        written = await self._status.write_all([*reports, *claims])
        for report in ended:
            self._retire(report.attempt, report.state)
        self._start_claimed(claims, written[len(reports) :], desired)

    def _observe(self, desired: dict[TaskRef, Assignment]) -> list[StatusReport]:
        """What changed of every attempt, to report; forgets those that never ran."""
        reports = []
        for task, attempts in list(self._attempts.items()):
            for attempt in list(attempts.values()):
                seen = self._observer.observe(attempt, desired.get(task))
                if seen is NEVER_RAN:
                    self._forget_attempt(attempt)
                elif isinstance(seen, StatusReport):
                    reports.append(seen)
        return reports

    async def _claims(
        self, desired: dict[TaskRef, Assignment], ending: set[TaskRef]
    ) -> list[StatusReport]:
        """For the new assignments: a claim of the status key of each that may start now, or
        the report of one that must not (or may not yet) start. `ending`: tasks whose attempt's
        end this pass reports (a new at-most-once attempt of one is claimed in the next pass,
        which this one wakes)."""
        new = [(t, a) for t, a in desired.items() if (t, a.attempt) not in self._known]
        to_start = {task for task, a in new if a.desired is DesiredState.RUNNING}
        waiting = await self._profiles.blocking() if to_start else None
        # Forget what was reported for tasks that no longer wait (started, stopped, gone).
        self._waiting = {
            task: reported
            for task, reported in self._waiting.items()
            if waiting is not None and task in to_start
        }
        reports: list[StatusReport] = []
        for task, assignment in new:
            attempt = self._attempt(task, assignment)
            if task not in to_start:
                never = {"finished_at": datetime.now(UTC), "message": "stopped before it started"}
                reports.append(StatusReport(attempt, TaskState.KILLED, True, never))
            elif waiting is not None:
                # A task that may not start before the host profile switch is `placed`,
                # saying why (once per attempt and reason).
                if self._waiting.get(task) != (assignment.attempt, waiting):
                    reports.append(
                        StatusReport(attempt, TaskState.PLACED, True, {"message": waiting})
                    )
            elif not assignment.at_most_once:
                reports.append(StatusReport(attempt, TaskState.STARTING, True))
            elif task in self._attempts:
                # Only once the task's older attempt here has ended and that end is reported:
                # when this pass reports it, the next pass comes at once.
                if task in ending:
                    self._wake.set()
            elif self._fence.follows(self._registration.keeper):
                # And only under a fence that a live lease extends.
                reports.append(StatusReport(attempt, TaskState.STARTING, True))
        return reports

    def _start_claimed(
        self,
        claims: list[StatusReport],
        written: list[bool],
        desired: dict[TaskRef, Assignment],
    ) -> None:
        """Acts on what the pass's write did with each of `_claims`' reports."""
        for report, claimed in zip(claims, written, strict=True):
            attempt = report.attempt
            if report.state is TaskState.KILLED:
                # An attempt stopped before it ever ran here: the scheduler can let go.
                self._known.add((attempt.task, attempt.number))
            elif report.state is TaskState.PLACED:
                self._waiting[attempt.task] = (attempt.number, report.message)
            elif claimed:
                self._launch(attempt, desired[attempt.task])
            # else the status already describes a newer attempt, or the task is gone: the
            # assignment is stale.

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
            self._attempts.setdefault(files.task, {})[files.attempt] = Attempt(
                files, now, adopted=True
            )
            _log.info("adopting attempt %d of task %s", files.attempt, files.task.task_id)

    def _retire(self, attempt: Attempt, state: TaskState) -> None:
        """Lets go of an attempt whose end (`state`) was reported."""
        metrics.AGENT_TASKS_EXITED.labels(state.value).inc()
        self._fence.discard(attempt.files)
        busy = self._drop(attempt)
        self._executor.release(attempt.files, self._settings.keep_attempts, busy)
        self._forget_status(attempt.task)

    def _forget_attempt(self, attempt: Attempt) -> None:
        """Forgets an attempt that never ran, so that it is started as if it were new."""
        self._fence.discard(attempt.files)
        self._drop(attempt)
        self._known.discard((attempt.task, attempt.number))

    def _drop(self, attempt: Attempt) -> set[int]:
        """Removes the attempt from those it watches; returns the task's others."""
        task_attempts = self._attempts[attempt.task]
        del task_attempts[attempt.number]
        if not task_attempts:
            del self._attempts[attempt.task]
        return set(task_attempts)

    # --- starting ----------------------------------------------------------------------------

    def _launch(self, attempt: Attempt, assignment: Assignment) -> None:
        """Starts an attempt whose status key it claimed."""
        task = attempt.task
        self._known.add((task, assignment.attempt))
        self._attempts.setdefault(task, {})[assignment.attempt] = attempt
        _log.info("starting attempt %d of task %s", assignment.attempt, task.task_id)
        if assignment.at_most_once:
            self._fence.add(attempt.files)
        environment = task_environment(self.machine.id, task, assignment)
        try:
            self._executor.launch(attempt.files, assignment, environment)
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

    def _attempt(self, task: TaskRef, assignment: Assignment) -> Attempt:
        """A new attempt of the assignment's, with the progress it resumes from."""
        files = self.work_dir.attempt(task, assignment.attempt)
        return Attempt(files, time.monotonic(), progress=assignment.progress)

    # --- status ------------------------------------------------------------------------------

    def _forget_status(self, task: TaskRef) -> None:
        """Drops what the agent knows of the task's status once it neither runs nor is wanted
        here (it may come back: then the first write reads the key)."""
        if task not in self._attempts and task not in self._desired:
            self._status.forget(task)


def _with_profile(machine: Machine, profile: str | None) -> Machine:
    return Machine.model_validate({**dict(machine), "host_profile_current": profile})
