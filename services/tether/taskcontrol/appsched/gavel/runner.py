"""Gavel's rounds on a real region, for one entitlement's accelerator jobs.

Each round observes the jobs through the REST API (new, done, their progress), plans with the
`RoundScheduler`, suspends the jobs that leave their accelerators (their tasks get the
entitlement's grace to checkpoint), waits until they have stopped, and resumes the chosen ones
on their type."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tether.model import FINISHED_STATES, GPU_TYPE_ATTRIBUTE, TaskState
from tether.model.accelerator import ProfileError, ThroughputProfile
from tether.sdk.errors import TetherError
from tether.sdk.views import JobView, MachineView, TaskView
from tether.taskcontrol.appsched.gavel.policies.registry import POLICIES
from tether.taskcontrol.appsched.gavel.problem import AcceleratorJob
from tether.taskcontrol.appsched.gavel.rounds import ROUND_S, RoundScheduler

_log = logging.getLogger(__name__)

STOP_POLL_S = 0.5
"""How often a round looks whether the jobs it suspended have stopped."""


class Region(Protocol):
    """What the runner asks of the region: `tether.sdk.TetherClient` is one."""

    def list_jobs(self, entitlement: str | None = None) -> list[JobView]: ...
    def list_entitlements(self) -> list[dict[str, Any]]: ...
    def get_job(self, handle: str) -> JobView: ...
    def list_tasks(self, handle: str) -> list[TaskView]: ...
    def suspend_job(self, handle: str) -> JobView: ...
    def resume_job(self, handle: str, placement: dict[str, Any] | None = None) -> JobView: ...
    def list_machines(self) -> list[MachineView]: ...
    def put_accelerator_report(self, entitlement: str, report: Mapping[str, Any]) -> Any: ...


def accelerators_of(machines: list[MachineView]) -> dict[str, int]:
    """GPUs by `gpu_type` on the machines that are up."""
    counts: dict[str, int] = {}
    for machine in machines:
        kind = machine.attributes.get(GPU_TYPE_ATTRIBUTE)
        if kind is not None and machine.state == "up":
            counts[kind] = counts.get(kind, 0) + machine.capacity.gpus
    return counts


def placed_type(spec: Mapping[str, Any]) -> str | None:
    """The accelerator type a job's placement pins it to (`gpu_type == T`), if any."""
    for constraint in spec.get("placement", {}).get("constraints", []):
        if constraint.get("attribute") == GPU_TYPE_ATTRIBUTE and constraint.get("op") == "==":
            return str(constraint.get("value"))
    return None


def on_type(placement: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """`placement` with its `gpu_type` constraint (if any) replaced by `gpu_type == kind`."""
    constraints = [
        constraint
        for constraint in placement.get("constraints", [])
        if constraint.get("attribute") != GPU_TYPE_ATTRIBUTE
    ]
    pinned = {"attribute": GPU_TYPE_ATTRIBUTE, "op": "==", "value": kind}
    return {**placement, "constraints": [*constraints, pinned]}


@dataclass
class RoundReport:
    """What one round did."""

    running: dict[str, str] = field(default_factory=dict)
    """Job handle -> the accelerator type it runs on this round."""
    suspended: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)


class GavelRunner:
    """Runs rounds of `round_s` over the accelerator jobs (`JobSpec.accelerator`) of
    `entitlement` and the entitlements under it, each job's entitlement its entity (weighted
    by its `weight`) for the hierarchical policy.

    A job is submitted suspended, or is suspended by the first round; the runner then owns its
    `suspended` flag and its `gpu_type` constraint. Nothing is kept but in memory: a new runner
    rebuilds its picture from the jobs and the steps their tasks reported.
    """

    def __init__(
        self,
        region: Region,
        entitlement: str,
        policy: str,
        profile: ThroughputProfile,
        *,
        round_s: float = ROUND_S,
        accelerators: Mapping[str, int] | None = None,
        stop_timeout_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.region = region
        self.entitlement = entitlement
        self.profile = profile
        self.round_s = round_s
        self.stop_timeout_s = stop_timeout_s
        self._clock, self._sleep = clock, sleep
        self._given = dict(accelerators or {})
        self.policy = policy
        self.scheduler = RoundScheduler(POLICIES[policy], self._accelerators())
        self.rounds = 0
        self._ignored: set[str] = set()
        """Jobs the rounds no longer look at: refused (no throughputs for them) or over."""
        self._resumed: set[str] = set()
        """The jobs the last round started or moved."""
        self._last_round_s = clock()

    def _accelerators(self) -> dict[str, int]:
        """The GPUs by type: as given, else those of the machines up now."""
        counts = self._given or accelerators_of(self.region.list_machines())
        if not any(counts.values()):
            raise ValueError(
                "no accelerators: no machine that is up has a gpu_type attribute and GPUs "
                "(or give the counts)"
            )
        return counts

    def round(self) -> RoundReport:
        """One round: observe, plan, suspend what leaves, resume what comes."""
        now = self._clock()
        report = RoundReport()
        self.scheduler.count_accelerators(self._accelerators())
        views = self._observe(report)
        chosen = self.scheduler.plan(now)
        # Leaving: running, and not chosen, or chosen for another type (or none pinned yet).
        leaving = [
            handle
            for handle, view in views.items()
            if handle in self.scheduler.jobs
            and not view.spec.get("suspended", False)
            and (handle not in chosen or chosen[handle] != placed_type(view.spec))
        ]
        for handle in leaving:
            self.region.suspend_job(handle)
        report.suspended = leaving
        self._wait_stopped(leaving)
        for handle, kind in chosen.items():
            view = views[handle]
            if handle in leaving or view.spec.get("suspended", False):
                self.region.resume_job(handle, on_type(view.spec.get("placement", {}), kind))
                report.resumed.append(handle)
        self.scheduler.record(chosen, self.round_s)
        report.running = chosen
        self._resumed, self._last_round_s = set(report.resumed), now
        self.rounds += 1
        self._publish(chosen)
        return report

    def _publish(self, chosen: Mapping[str, str]) -> None:
        """The round for the dashboard (`PUT /v1/accelerator-reports/{entitlement}`): a round
        whose report cannot be written still ran."""
        allocation, received = self.scheduler.allocation, self.scheduler.received()
        jobs = [
            {
                "job": name,
                "running_on": chosen.get(name, ""),
                "allocation": _shares(allocation.get(name, {})),
                "received": _shares(received.get(name, {})),
            }
            for name in sorted(self.scheduler.jobs)
        ]
        report = {
            "policy": self.policy,
            "round_s": self.round_s,
            "rounds": self.rounds,
            "accelerators": self.scheduler.counts,
            "jobs": jobs,
        }
        try:
            self.region.put_accelerator_report(self.entitlement, report)
        except TetherError as error:
            _log.warning("round %d's report was not written: %s", self.rounds, error)

    def run(self, stop: threading.Event) -> None:
        """Rounds every `round_s` until `stop` is set (a round under way finishes). A round
        that fails is logged, and the next starts from what the region says then."""
        done = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                report = self.round()
            except Exception as error:
                if isinstance(error, TetherError):
                    _log.warning("round %d failed: %s", done + 1, error)
                else:
                    _log.exception("round %d failed", done + 1)
                # What it started, or not, says nothing of any job's speed next round.
                self._resumed = set(self.scheduler.jobs)
                done += 1
                stop.wait(self.round_s)
                continue
            _log.info(
                "round %d: %d running, %d suspended, %d resumed, %d finished",
                done + 1,
                len(report.running),
                len(report.suspended),
                len(report.resumed),
                len(report.finished),
            )
            done += 1
            stop.wait(max(0.0, started + self.round_s - time.monotonic()))

    def _observe(self, report: RoundReport) -> dict[str, JobView]:
        """The entitlement's accelerator jobs still to run, by handle; new ones added to the
        scheduler, finished and deleted ones removed, and the steps of last round's reported."""
        found: dict[str, JobView] = {}
        weights = self._subtree()
        self.scheduler.weigh_entities(weights)
        views = [view for name in sorted(weights) for view in self.region.list_jobs(name)]
        for view in views:
            accelerator = view.spec.get("accelerator")
            if accelerator is None or view.deleting or view.handle in self._ignored:
                continue
            if self._over(view):
                self._ignored.add(view.handle)
                if view.handle in self.scheduler.jobs:
                    self.scheduler.remove(view.handle)
                    report.finished.append(view.handle)
                continue
            if view.handle not in self.scheduler.jobs and not self._add(view, accelerator):
                continue
            found[view.handle] = view
        for gone in set(self.scheduler.jobs) - set(found):
            self.scheduler.remove(gone)
        ran, since = self.scheduler.last_round, self._clock() - self._last_round_s
        for handle in found:
            progress = self.region.get_job(handle).progress
            if progress is None:
                continue
            kind = ran.get(handle)
            # A job (re)started last round spent part of it starting: its steps then say
            # little of its speed.
            steady = kind is not None and handle not in self._resumed
            self.scheduler.report(handle, progress, kind or "", since if steady else 0.0)
        return found

    def _over(self, view: JobView) -> bool:
        """Whether every task of the job is done for good: all exited, or ended and taken off
        their machines (a task that failed on its machine may yet be restarted there). A job
        whose task failed for good would otherwise hold accelerators round after round."""
        if view.tasks.get(TaskState.EXITED, 0) >= view.count:
            return True
        if sum(view.tasks.get(state, 0) for state in FINISHED_STATES) < view.count:
            return False
        if any(task.machine is not None for task in self.region.list_tasks(view.handle)):
            return False
        _log.warning(
            "%s ended without finishing (%s); its accelerators go to the other jobs",
            view.handle,
            ", ".join(f"{count} {state}" for state, count in sorted(view.tasks.items())),
        )
        return True

    def _subtree(self) -> dict[str, float]:
        """The entitlement and those under it that the principal sees, with their weights:
        the hierarchical policy's entities are the jobs' entitlements."""
        seen = {found["name"]: found for found in self.region.list_entitlements()}
        weights = {self.entitlement: float(seen.get(self.entitlement, {}).get("weight", 1))}
        grown = True
        while grown:
            under = {
                name: float(found.get("weight", 1))
                for name, found in seen.items()
                if found.get("parent") in weights and name not in weights
            }
            weights |= under
            grown = bool(under)
        return weights

    def _add(self, view: JobView, accelerator: Mapping[str, Any]) -> bool:
        try:
            throughputs = self.profile.throughputs(
                str(accelerator["job_type"]), int(accelerator["scale_factor"])
            )
            job = AcceleratorJob(
                name=view.handle,
                scale_factor=int(accelerator["scale_factor"]),
                throughputs=throughputs,
                entity=view.entitlement,
            )
            self.scheduler.add(job, float(accelerator["total_steps"]), view.created_at.timestamp())
        except (ProfileError, ValueError) as error:
            _log.warning("not scheduling %s: %s", view.handle, error)
            self._ignored.add(view.handle)
            return False
        return True

    def _wait_stopped(self, handles: list[str]) -> None:
        """Until none of `handles` runs a task (their grace may run out first)."""
        deadline = self._clock() + self.stop_timeout_s
        waiting = list(handles)
        while waiting:
            waiting = [handle for handle in waiting if not _stopped(self.region.get_job(handle))]
            if not waiting:
                return
            if self._clock() > deadline:
                _log.warning("%s still run after %.0f s", ", ".join(waiting), self.stop_timeout_s)
                return
            self._sleep(STOP_POLL_S)


def _stopped(view: JobView) -> bool:
    """Whether a suspended job's tasks have all stopped: it waits in its queue again."""
    if view.admission is None:
        return view.running == 0
    return view.admission.state == "queued"


def _shares(by_type: Mapping[str, float]) -> dict[str, float]:
    """Fractions of the time, rounded, and within [0, 1] whatever the float sums gave."""
    return {kind: round(min(1.0, max(0.0, share)), 4) for kind, share in by_type.items()}
