"""The placement view: an allocator's explanation of where a job's tasks go, and why."""

from __future__ import annotations

from tether.frontend.schemas import View
from tether.proto.allocator.v1 import allocator_pb2


class RuleView(View):
    """One hard placement rule, in the order the allocator applied it."""

    rule: str
    """The rule, e.g. `resources.memory` or `constraint dc in [dc1]`."""
    machines_rejected: int
    """Machines this rule rejected that the earlier rules had let through."""
    detail: str
    """More for people, e.g. the closest miss."""


class PreferenceView(View):
    """One preference rule of the job, in the job's order."""

    rule: str
    weight: int
    """Larger than the weights of every later rule together."""
    machines_matching: int
    """Fitting machines that satisfy it."""


class ChosenMachineView(View):
    """A machine holding tasks of the job."""

    machine: str
    tasks: list[int]
    """The job's task indexes on it, ascending."""
    rank: int
    """Its position among the machines that could take one more task now (1: first choice);
    0 when it could take none."""
    preferences: list[str]
    """The preference rules it satisfies."""


class PlacementView(View):
    """Why a job's tasks are placed where they are, or why they cannot be placed."""

    job: str
    """The job's handle."""
    summary: str
    """One line for people, e.g. "0 of 4 machines fit: resources.memory rejected 4"."""
    machines_considered: int
    machines_fitting: int
    """Machines every hard rule accepts: where one more task could go now."""
    entitlement_machines: int
    """Machines the job's entitlement holds."""
    rules: list[RuleView]
    preferences: list[PreferenceView]
    chosen: list[ChosenMachineView]
    """Machines holding the job's tasks, by machine id."""

    @classmethod
    def of(cls, explained: allocator_pb2.ExplainResponse) -> PlacementView:
        return cls(
            job=explained.job_handle,
            summary=explained.summary,
            machines_considered=explained.machines_considered,
            machines_fitting=explained.machines_fitting,
            entitlement_machines=explained.entitlement_machines,
            rules=[
                RuleView(rule=r.rule, machines_rejected=r.machines_rejected, detail=r.detail)
                for r in explained.rules
            ],
            preferences=[
                PreferenceView(rule=p.rule, weight=p.weight, machines_matching=p.machines_matching)
                for p in explained.preferences
            ],
            chosen=[
                ChosenMachineView(
                    machine=c.machine_id,
                    tasks=sorted(c.task_indexes),
                    rank=c.rank,
                    preferences=list(c.preferences),
                )
                for c in sorted(explained.chosen_machines, key=lambda c: c.machine_id)
            ],
        )
