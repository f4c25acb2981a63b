"""A soak under faults: a region on a three-member etcd cluster, one agent behind a link that can
be cut, REST churn from several clients and a fault injector; then it settles, and the audit
says what was lost, what ran twice, and what was left behind (`scripts/soak.py`)."""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from tests.support.churn import Churn
from tests.support.faults import TwiceSampler, task_processes
from tests.support.harness import LocalRegion, all_running, get_json, sleeper_job, submit, wait_for
from tests.support.netns import Namespace, start_agent_in
from tests.support.soak.audit import audit_store, stray_processes
from tests.support.soak.injector import FaultInjector, FaultTimings
from tether.model import DEFAULT_FENCING_S
from tether.store.etcd_server import EtcdCluster

STEADY_JOBS = {"default/steady": False, "default/steady-once": True}
"""Jobs that run through the whole soak untouched, handle -> at most once: a new attempt of
their tasks is a restart caused by a fault."""
STEADY_TASKS = 4
"""One per MSB: each steady job has a task on the machine that gets cut off."""
CHURN_STEPS = ("submit", "grow", "update", "shrink", "delete")


@dataclass(frozen=True)
class SoakOptions:
    minutes: float
    rounds: int | None = None
    """Stop sooner, once every kind of fault has been injected this many times."""
    clients: int = 3
    seed: int = 0
    timings: FaultTimings = field(default_factory=FaultTimings)
    settle_timeout_s: float = 180.0


class Soak:
    """The soak's region and everything around it, set up on entering and removed on leaving
    (whatever happened); `run()` soaks it and returns the report."""

    def __init__(
        self, directory: Path, options: SoakOptions, progress: Callable[[str], None]
    ) -> None:
        self.options = options
        self.progress = progress
        self.namespace = Namespace.unique()
        self.cluster = EtcdCluster(3, on_tmpfs=True, extra_client_hosts=[self.namespace.host_ip])
        self.region = LocalRegion(
            directory / "tether",
            store_args=["--store", self.cluster.url],
            agents=3,
            frontends=2,
            supervised=True,
            # The services' own fencing period, not the tests' 3 s: an agent killed just
            # after a renewal is restarted by `tether up` within it, and its at-most-once
            # tasks live on, as in a real region.
            fencing_s=DEFAULT_FENCING_S,
        )
        self.cut_off_agent: Any = None
        self.cut_off_machine = ""

    def __enter__(self) -> Self:
        try:
            self.namespace.create()
            self.progress("starting a 3-member etcd cluster")
            self.cluster.start()
            self.progress("starting the region")
            self.region.start()
            self.cut_off_agent, self.cut_off_machine = start_agent_in(
                self.namespace, self.region, self.cluster.url_on(self.namespace.host_ip)
            )
            with self.region.client() as client:
                wait_for(
                    lambda: _machine_states(client).get(self.cut_off_machine) == "up",
                    timeout_s=60,
                    what=f"the agent of {self.cut_off_machine} in its namespace to join",
                )
                for handle, at_most_once in STEADY_JOBS.items():
                    name = handle.split("/")[1]
                    submit(client, sleeper_job(name, STEADY_TASKS) | {"at_most_once": at_most_once})
                for handle in STEADY_JOBS:
                    wait_for(
                        functools.partial(all_running, client, handle, STEADY_TASKS),
                        timeout_s=60,
                        what=f"{handle} to run",
                    )
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        try:
            if self.cut_off_agent is not None and self.cut_off_agent.poll() is None:
                self.cut_off_agent.kill()
                self.cut_off_agent.wait(timeout=10)
            # Also kills the cut-off agent's tasks: its work dir is under the region's.
            self.region.cleanup()
        finally:
            self.cluster.cleanup()
            self.namespace.delete()

    def run(self) -> dict[str, Any]:
        """Churn and faults for `minutes`, then settle and audit; the report."""
        region, options = self.region, self.options
        churns = [
            Churn(
                region.urls,
                region.token,
                ["default"],
                name=f"churn{i}",
                steps=CHURN_STEPS,
                at_most_once_every=2,
                interval_s=0.5,
            )
            for i in range(options.clients)
        ]
        sampler = TwiceSampler(region.state_dir)
        injector = FaultInjector(
            region,
            self.cluster,
            self.namespace,
            seed=options.seed,
            timings=options.timings,
            log=lambda line: self.progress(f"fault: {line}"),
            rounds=options.rounds,
        )
        for thread in (sampler, *churns, injector):
            thread.start()
        started = time.monotonic()
        try:
            deadline = started + options.minutes * 60
            while (left := deadline - time.monotonic()) > 0 and injector.is_alive():
                injector.join(min(left, 30.0))
                requests = sum(churn.requests for churn in churns)
                self.progress(
                    f"{(time.monotonic() - started) / 60:.1f} of {options.minutes} min: "
                    f"{len(injector.injected)} faults, {requests} requests"
                )
        finally:
            injector.stop()
            for churn in churns:
                churn.stop()
        self.progress("faults and churn stopped; settling")
        settle_s = self._settle(churns)
        sampler.stop()
        return self._report(churns, sampler, injector, settle_s)

    def _settle(self, churns: list[Churn]) -> float | None:
        """Waits until the region holds what the churn was told and nothing else runs; the
        seconds it took, or None if it did not within the settle timeout."""
        started = time.monotonic()
        deadline = started + self.options.settle_timeout_s
        with self.region.client() as client:
            while time.monotonic() < deadline:
                if not self._unsettled(client, churns):
                    return time.monotonic() - started
                time.sleep(1.0)
            self.progress(f"not settled: {self._unsettled(client, churns)[:10]}")
        return None

    def _unsettled(self, client: httpx.Client, churns: list[Churn]) -> list[str]:
        try:
            waiting = [line for churn in churns for line in churn.compare(client).waiting]
            waiting += [h for h in STEADY_JOBS if not all_running(client, h, STEADY_TASKS)]
            machines = _machine_states(client)
        except (httpx.HTTPError, AssertionError) as exc:
            return [f"the API: {exc}"]
        waiting += [f"machine {m} is {state}" for m, state in machines.items() if state != "up"]
        tasks = audit_store(self.region.store_url()).tasks
        stray = stray_processes(task_processes(self.region.state_dir), tasks)
        return waiting + [f"stray process {process}" for process in stray]

    def _report(
        self,
        churns: list[Churn],
        sampler: TwiceSampler,
        injector: FaultInjector,
        settle_s: float | None,
    ) -> dict[str, Any]:
        audit = audit_store(self.region.store_url())
        stray = stray_processes(task_processes(self.region.state_dir), audit.tasks)
        with self.region.client() as client:
            held = [churn.compare(client) for churn in churns]
        at_most_once = {
            handle for churn in churns for handle, job in churn.accepted.items() if job.at_most_once
        } | {handle for handle, once in STEADY_JOBS.items() if once}
        twice_once = sorted(
            task_id
            for task_id, most in sampler.most.items()
            if most > 1 and task_id.rpartition("/")[0] in at_most_once
        )
        twice_other_s = sum(
            seconds
            for task_id, seconds in sampler.twice_s.items()
            if task_id.rpartition("/")[0] not in at_most_once
        )
        server_errors = [error for churn in churns for error in churn.server_errors]
        unexcused = [
            error
            for error in server_errors
            if error.status != 503 or not injector.in_store_fault(error.at)
        ]
        state = self.region.state()
        restarts = self._fault_restarts(sampler)
        return {
            "benchmark": "soak",
            "minutes": self.options.minutes,
            "seed": self.options.seed,
            "store": "etcd, 3 members",
            "machines": self.region.agents + 1,
            "clients": len(churns),
            "faults_injected": injector.counts(),
            "faults_skipped": dict(injector.skipped),
            "injector_failure": None if injector.failure is None else repr(injector.failure),
            "requests": sum(churn.requests for churn in churns),
            "answers": dict(sum((churn.statuses for churn in churns), Counter())),
            "unexpected_answers": [line for churn in churns for line in churn.unexpected][:20],
            "errors_5xx": len(server_errors),
            "errors_5xx_outside_store_faults": [e.call for e in unexcused][:20],
            "jobs_accepted": sum(len(churn.accepted) for churn in churns),
            "accepted_jobs_lost": sum(len(h.lost) for h in held),
            "jobs_not_as_accepted": [line for h in held for line in h.wrong][:20],
            "tasks_twice_at_most_once": len(twice_once),
            "tasks_twice_at_most_once_ids": twice_once[:20],
            "tasks_twice_other_s": round(twice_other_s, 1),
            "overcommitted_machines": len(audit.overcommitted_machines),
            "orphan_keys": len(audit.orphan_keys),
            "orphan_keys_sample": audit.orphan_keys[:20],
            "stray_processes": len(stray),
            "task_restarts_from_control_plane_faults": len(restarts),
            "task_restarts_sample": sorted(set(restarts))[:20],
            "samples": sampler.samples,
            "mean_sample_interval_s": round(sampler.mean_interval_s, 3),
            "settled": settle_s is not None,
            "settle_s": None if settle_s is None else round(settle_s, 1),
            "services_restarted": sum(state.restarts.values()),
            "services_dead": state.dead,
        }

    def _fault_restarts(self, sampler: TwiceSampler) -> list[str]:
        """New attempts of the steady jobs' tasks, besides those that had to move off the
        machine that was cut off: each was caused by a fault of the control plane. One line
        each: the task, and the machines of its attempts in turn."""
        restarts = []
        for task_id, attempts in sorted(sampler.attempts.items()):
            if task_id.rpartition("/")[0] not in STEADY_JOBS:
                continue
            machines = [attempts[attempt] for attempt in sorted(attempts)]
            moved = sum(1 for machine in machines[:-1] if machine != self.cut_off_machine)
            restarts += [f"{task_id}: {' -> '.join(machines)}"] * moved
        return restarts


def _machine_states(client: httpx.Client) -> dict[str, str]:
    return {m["id"]: m["state"] for m in get_json(client, "/v1/machines")["machines"]}
