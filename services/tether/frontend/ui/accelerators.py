"""The dashboard's accelerators: per accelerator type, the jobs each entitlement's Gavel runner
runs and their shares of the time against the policy's allocation; and the ephemeral resources
per label and machine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from fastapi import APIRouter
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.accelerators import accelerator_reports
from tether.frontend.auth import visible_entitlements
from tether.frontend.deps import AllocatorsDep
from tether.frontend.ephemeral import resource_views
from tether.frontend.problems import Problem
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.resources import ResourceView
from tether.frontend.ui.render import page
from tether.frontend.ui.session import UiPrincipal
from tether.model.accelerator import AcceleratorReport
from tether.model.ephemeral import EphemeralResource
from tether.store import keys

router = APIRouter(prefix="/ui/accelerators", include_in_schema=False)

MACHINES_SHOWN: Final = 50
"""Machines listed per ephemeral resource."""


@dataclass(frozen=True)
class TypeShare:
    job: str
    running: bool
    allocated: float
    received: float


@dataclass
class AcceleratorType:
    """One accelerator type of a report: how many, and each job's time on it."""

    name: str
    count: int
    jobs: list[TypeShare] = field(default_factory=list)


def by_type(report: AcceleratorReport) -> list[AcceleratorType]:
    """The report's accelerator types in name order, each with the jobs that have time on it
    (allocated, received or running now), most allocated first."""
    types = {name: AcceleratorType(name, count) for name, count in report.accelerators.items()}
    for share in report.jobs:
        for name in {*share.allocation, *share.received, share.running_on} - {""}:
            kind = types.setdefault(name, AcceleratorType(name, 0))
            kind.jobs.append(
                TypeShare(
                    share.job,
                    share.running_on == name,
                    share.allocation.get(name, 0.0),
                    share.received.get(name, 0.0),
                )
            )
    for kind in types.values():
        kind.jobs.sort(key=lambda share: (-share.allocated, share.job))
    return [types[name] for name in sorted(types)]


@router.get("")
async def accelerators_page(
    store: ReadsDep, allocators: AllocatorsDep, principal: UiPrincipal, fragment: bool = False
) -> Response:
    """Gavel's rounds and the ephemeral resources, or (with `fragment`) the part that changes."""
    visible = None if principal.is_admin else await visible_entitlements(store, principal)
    reports = await accelerator_reports(store, visible)
    found = [
        record
        for record in await records.scan(store, keys.EPHEMERAL_RESOURCES, EphemeralResource)
        if visible is None or record.entitlement in visible
    ]
    resources: list[ResourceView] = []
    problem = ""
    try:
        resources = await resource_views(allocators, found, MACHINES_SHOWN)
    except Problem as unanswered:
        problem = unanswered.detail
    return page(
        "_accelerators.html" if fragment else "accelerators.html",
        principal,
        reports=[(report, by_type(report)) for report in reports],
        resources=resources,
        problem=problem,
    )
