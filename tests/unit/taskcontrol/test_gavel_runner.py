"""Gavel's rounds against an in-memory region (the REST calls the runner makes, answered as the
frontend would): jobs placed on their type, suspended and resumed elsewhere, their steps taken
from the views, finished ones let go. The real region is in tests/e2e/test_gavel.py."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from tests.support.api import JOB, machine, task
from tether.model.accelerator import ThroughputProfile
from tether.sdk import TetherAPIError
from tether.sdk.views import JobView, MachineView, TaskView
from tether.taskcontrol.appsched.gavel.runner import GavelRunner, on_type, placed_type

PROFILE = ThroughputProfile.parse(
    {
        "v100": {"fast-on-v100": {"1": 10.0}, "alike": {"1": 2.0, "2": 4.0}},
        "k80": {"fast-on-v100": {"1": 1.0}, "alike": {"1": 2.0, "2": 4.0}},
    }
)


class FakeRegion:
    """Jobs of team-a as views; a suspended job stops at once unless `slow_stop`."""

    def __init__(self) -> None:
        self.entitlements = [{"name": "team-a", "weight": 1}, {"name": "other", "weight": 5}]
        self.jobs: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.slow_stop: set[str] = set()
        self.reports: list[dict[str, Any]] = []
        self.refuse_reports = False
        self.tasks: dict[str, list[dict[str, Any]]] = {}
        """Task views by job, where a test sets them."""
        self.machines = [
            gpu_machine("m1", "v100"),
            gpu_machine("m2", "k80"),
            machine("m3"),  # no GPU type: not counted
        ]

    def submit(
        self, name: str, job_type: str, steps: float, created: str, entitlement: str = "team-a"
    ) -> str:
        view = copy.deepcopy(JOB) | {
            "handle": f"{entitlement}/{name}",
            "entitlement": entitlement,
            "name": name,
            "count": 1,
        }
        view["created_at"] = created
        view["spec"] |= {
            "name": name,
            "entitlement": entitlement,
            "count": 1,
            "kind": "batch",
            "suspended": True,
            "accelerator": {"job_type": job_type, "total_steps": steps, "scale_factor": 1},
        }
        view["tasks"], view["running"] = {}, 0
        self.jobs[view["handle"]] = view
        return str(view["handle"])

    def list_jobs(self, entitlement: str | None = None) -> list[JobView]:
        views = [JobView.model_validate(view) for view in self.jobs.values()]
        return [view for view in views if view.entitlement == entitlement]

    def list_entitlements(self) -> list[dict[str, Any]]:
        return self.entitlements

    def get_job(self, handle: str) -> JobView:
        return JobView.model_validate(self.jobs[handle])

    def list_tasks(self, handle: str) -> list[TaskView]:
        self.calls.append(("tasks", handle))
        return [TaskView.model_validate(found) for found in self.tasks.get(handle, [])]

    def suspend_job(self, handle: str) -> JobView:
        self.calls.append(("suspend", handle))
        view = self.jobs[handle]
        view["spec"]["suspended"] = True
        if handle not in self.slow_stop:
            view["running"] = 0
            view["admission"] = admission(handle, "queued")
        return self.get_job(handle)

    def resume_job(self, handle: str, placement: dict[str, Any] | None = None) -> JobView:
        self.calls.append(("resume", f"{handle} on {placed_type({'placement': placement})}"))
        view = self.jobs[handle]
        view["spec"] |= {"suspended": False, "placement": placement}
        view["running"] = 1
        view["admission"] = admission(handle, "admitted")
        return self.get_job(handle)

    def list_machines(self) -> list[MachineView]:
        return [MachineView.model_validate(found) for found in self.machines]

    def put_accelerator_report(self, entitlement: str, report: Mapping[str, Any]) -> None:
        if self.refuse_reports:
            raise TetherAPIError(409, "Conflict", f"entitlement '{entitlement}' is being deleted")
        self.reports.append({"entitlement": entitlement, **report})


def admission(handle: str, state: str) -> dict[str, Any]:
    return {
        "job": handle,
        "state": state,
        "priority": 100,
        "queued_at": "2025-01-02T03:00:00Z",
        "task_resources": {"cpu": 100, "memory_mib": 64, "gpus": 1},
        "tasks": 1,
        "least_tasks": 1,
        "updated_at": "2025-01-02T03:00:00Z",
    }


def gpu_machine(machine_id: str, kind: str) -> dict[str, Any]:
    found = machine(machine_id)
    found["attributes"] = {"gpu_type": kind}
    found["capacity"] = found["capacity"] | {"gpus": 1}
    return found


class Clock:
    def __init__(self) -> None:
        self.now = 1_735_787_045.0  # 2025-01-02T03:04:05Z

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def runner(region: FakeRegion, clock: Clock, policy: str = "max_min_fairness_perf") -> GavelRunner:
    return GavelRunner(
        region,
        "team-a",
        policy,
        PROFILE,
        round_s=60,
        clock=clock,
        sleep=clock.sleep,
    )


def test_each_job_is_resumed_on_the_type_the_round_gives_it() -> None:
    region, clock = FakeRegion(), Clock()
    fast = region.submit("fast", "fast-on-v100", 1e6, "2025-01-02T03:00:00Z")
    alike = region.submit("alike", "alike", 1e6, "2025-01-02T03:01:00Z")
    gavel = runner(region, clock)
    # The GPUs come from the machines' gpu_type attributes.
    assert gavel.scheduler.counts == {"v100": 1, "k80": 1}
    report = gavel.round()
    # The job ten times as fast on the V100 gets it; the other runs as fast on the K80.
    assert report.running == {fast: "v100", alike: "k80"}
    assert sorted(region.calls) == [("resume", f"{alike} on k80"), ("resume", f"{fast} on v100")]
    assert placed_type(region.jobs[fast]["spec"]) == "v100"


def test_each_round_reports_where_jobs_run_and_their_shares() -> None:
    region, clock = FakeRegion(), Clock()
    fast = region.submit("fast", "fast-on-v100", 1e6, "2025-01-02T03:00:00Z")
    alike = region.submit("alike", "alike", 1e6, "2025-01-02T03:01:00Z")
    gavel = runner(region, clock)
    gavel.round()
    [first] = region.reports
    assert (first["entitlement"], first["policy"], first["rounds"]) == (
        "team-a",
        "max_min_fairness_perf",
        1,
    )
    assert first["accelerators"] == {"v100": 1, "k80": 1}
    by_job = {share["job"]: share for share in first["jobs"]}
    assert (by_job[fast]["running_on"], by_job[alike]["running_on"]) == ("v100", "k80")
    # One round ran: each job had its type the whole time so far.
    assert by_job[fast]["received"] == {"v100": 1.0}
    assert sum(by_job[fast]["allocation"].values()) == pytest.approx(1.0, abs=1e-3)
    # A report the region refuses stops no round.
    region.refuse_reports = True
    clock.sleep(60)
    assert gavel.round().running
    assert len(region.reports) == 1


def test_fifo_keeps_the_oldest_running_and_the_next_takes_a_finished_jobs_gpu() -> None:
    region, clock = FakeRegion(), Clock()
    first = region.submit("first", "alike", 1e6, "2025-01-02T03:00:00Z")
    gavel = runner(region, clock, "fifo")
    where = gavel.round().running[first]
    assert placed_type(region.jobs[first]["spec"]) == where
    second, third = (
        region.submit(name, "alike", 1e6, f"2025-01-02T03:0{n}:00Z")
        for n, name in enumerate(("second", "third"), start=1)
    )
    region.calls.clear()
    report = gavel.round()
    other = ({"v100", "k80"} - {where}).pop()
    assert report.running == {first: where, second: other}
    assert region.calls == [("resume", f"{second} on {other}")]
    # The first finishes: the third takes its GPU, and the runner lets the first go.
    region.jobs[first]["tasks"] = {"exited": 1}
    report = gavel.round()
    assert report.finished == [first]
    assert first not in gavel.scheduler.jobs
    assert report.running == {second: other, third: where}


def test_a_job_whose_task_failed_for_good_is_let_go_and_its_gpu_goes_to_the_next() -> None:
    region, clock = FakeRegion(), Clock()
    broken, waiting, third = (
        region.submit(name, "alike", 1e6, f"2025-01-02T03:0{n}:00Z")
        for n, name in enumerate(("broken", "waiting", "third"))
    )
    region.jobs[broken]["count"] = 2
    region.jobs[broken]["spec"]["accelerator"]["scale_factor"] = 2
    region.machines[1]["attributes"]["gpu_type"] = "v100"
    gavel = runner(region, clock, "fifo")
    # Two V100s: the two-task job takes both, the others wait.
    assert gavel.round().running == {broken: "v100"}
    # One task exited, the other failed and waits on its machine for a restart: still running.
    region.jobs[broken]["tasks"] = {"exited": 1, "failed": 1}
    region.tasks[broken] = [task(0, "exited"), task(1, "failed", machine="m2")]
    report = gavel.round()
    assert report.running == {broken: "v100"}
    assert report.finished == []
    # Its restarts ran out: the task is off its machine for good, and so is the job.
    region.tasks[broken] = [task(0, "exited"), task(1, "failed")]
    region.calls.clear()
    report = gavel.round()
    assert report.finished == [broken]
    assert report.running == {waiting: "v100", third: "v100"}
    # Let go once: later rounds do not ask for its tasks again.
    region.calls.clear()
    gavel.round()
    assert ("tasks", broken) not in region.calls


def test_jobs_sharing_gpus_take_turns_each_suspended_before_another_resumes() -> None:
    region, clock = FakeRegion(), Clock()
    jobs = [region.submit(f"j{n}", "alike", 1e6, f"2025-01-02T03:0{n}:00Z") for n in range(3)]
    gavel = runner(region, clock, "max_min_fairness")
    rounds = []
    for _ in range(3):
        region.calls.clear()
        report = gavel.round()
        rounds.append(report.running)
        # Within a round every job that leaves its GPU is suspended (and stopped) before any
        # job is resumed on one, and what runs is what was resumed or kept.
        kinds = [call for call, _ in region.calls]
        assert kinds == sorted(kinds, key=lambda call: call != "suspend")
        for handle, kind in report.running.items():
            assert region.jobs[handle]["spec"]["suspended"] is False
            assert placed_type(region.jobs[handle]["spec"]) == kind
        assert all(region.jobs[h]["spec"]["suspended"] for h in jobs if h not in report.running)
        clock.sleep(60)
    # Two GPUs, three alike jobs: over three rounds each ran two.
    assert [sum(job in running for running in rounds) for job in jobs] == [2, 2, 2]


def test_a_round_waits_for_suspended_jobs_to_stop_and_not_past_its_timeout() -> None:
    region, clock = FakeRegion(), Clock()
    fast = region.submit("fast", "fast-on-v100", 1e6, "2025-01-02T03:00:00Z")
    gavel = runner(region, clock)
    gavel.stop_timeout_s = 30
    assert gavel.round().running == {fast: "v100"}
    # The V100's machine goes: the job moves to the K80, and a stop that never comes costs the
    # round its timeout, not more.
    region.machines = [found for found in region.machines if found["id"] != "m1"]
    region.slow_stop.add(fast)
    started = clock.now
    report = gavel.round()
    assert gavel.scheduler.counts == {"k80": 1}
    assert report.suspended == [fast]
    assert report.running == {fast: "k80"}
    assert 30 <= clock.now - started <= 31


def test_a_job_running_unpinned_that_is_not_chosen_is_suspended() -> None:
    region, clock = FakeRegion(), Clock()
    jobs = [region.submit(f"j{n}", "alike", 1e6, f"2025-01-02T03:0{n}:00Z") for n in range(3)]
    for handle in jobs:  # submitted running, not suspended: no gpu_type pinned
        region.jobs[handle]["spec"]["suspended"] = False
        region.jobs[handle]["running"] = 1
    report = runner(region, clock, "fifo").round()
    (waiting,) = set(jobs) - set(report.running)
    assert ("suspend", waiting) in region.calls
    assert region.jobs[waiting]["spec"]["suspended"] is True


def test_steps_come_from_the_job_views_and_a_steady_job_corrects_the_profile() -> None:
    region, clock = FakeRegion(), Clock()
    alike = region.submit("alike", "alike", 1e6, "2025-01-02T03:00:00Z")
    gavel = runner(region, clock)
    gavel.round()  # resumed: its first round says nothing of its speed
    clock.sleep(60)
    region.jobs[alike]["progress"] = 100.0
    gavel.round()
    assert gavel.scheduler.jobs[alike].steps_done == 100
    assert gavel.scheduler.jobs[alike].measured == {}
    clock.sleep(60)
    region.jobs[alike]["progress"] = 400.0  # 5 steps a second, not the profile's 2
    gavel.round()
    kind = gavel.scheduler.last_round[alike]
    assert gavel.scheduler.jobs[alike].measured[kind] == pytest.approx(5.0)


def test_the_entitlements_under_it_are_its_hierarchical_policys_entities() -> None:
    region, clock = FakeRegion(), Clock()
    region.entitlements += [
        {"name": "team-a-vision", "parent": "team-a", "weight": 3},
        {"name": "team-a-vision-small", "parent": "team-a-vision", "weight": 1},
    ]
    region.machines = [gpu_machine("m1", "v100")]
    ours = region.submit("ours", "alike", 1e6, "2025-01-02T03:00:00Z")
    vision = region.submit("v", "alike", 1e6, "2025-01-02T03:01:00Z", "team-a-vision")
    region.submit("elsewhere", "alike", 1e6, "2025-01-02T03:02:00Z", "other")
    gavel = runner(region, clock, "hierarchical")
    gavel.round()
    # One V100 shared 1:3 by the entitlements' weights; another tree's job is not ours.
    assert gavel.scheduler.entity_weights == {
        "team-a": 1.0,
        "team-a-vision": 3.0,
        "team-a-vision-small": 1.0,
    }
    assert set(gavel.scheduler.jobs) == {ours, vision}
    assert gavel.scheduler.allocation[ours]["v100"] == pytest.approx(0.25, abs=1e-6)
    assert gavel.scheduler.allocation[vision]["v100"] == pytest.approx(0.75, abs=1e-6)


def test_on_type_replaces_only_the_gpu_type_constraint() -> None:
    placement = {
        "gang": True,
        "constraints": [
            {"attribute": "zone", "op": "==", "value": "a"},
            {"attribute": "gpu_type", "op": "==", "value": "k80"},
        ],
    }
    moved = on_type(placement, "v100")
    assert moved["gang"] is True
    assert moved["constraints"] == [
        {"attribute": "zone", "op": "==", "value": "a"},
        {"attribute": "gpu_type", "op": "==", "value": "v100"},
    ]


def test_a_region_without_typed_gpus_is_refused() -> None:
    region = FakeRegion()
    region.machines = [machine("m1")]
    with pytest.raises(ValueError, match="no accelerators"):
        runner(region, Clock())
