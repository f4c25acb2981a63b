"""The dashboard's entitlements and queues: the quota tree with each entitlement's use, weight,
what it borrows and lends, its waiting jobs in order, and the latest preemptions and why."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from fastapi import APIRouter
from starlette.responses import Response

from tether.frontend import queues, records
from tether.frontend.auth import can_see
from tether.frontend.deps import QueueIndexDep
from tether.frontend.revisions import ReadsDep
from tether.frontend.ui.render import page
from tether.frontend.ui.session import UiPrincipal
from tether.model import Entitlement
from tether.model.admission import Admission, AdmissionEventKind, EntitlementUse
from tether.model.resources import resources_text
from tether.store import keys

router = APIRouter(prefix="/ui/entitlements", include_in_schema=False)

WAITING_SHOWN: Final = 10
PREEMPTIONS_SHOWN: Final = 20


@dataclass(frozen=True)
class Branch:
    """One entitlement in the tree, at its depth, with what its decider reported of it."""

    entitlement: Entitlement
    depth: int
    use: EntitlementUse | None
    waiting: list[Any]
    """The first WAITING_SHOWN of its queue: `QueueIndex` records, in order."""
    waiting_total: int


@dataclass(frozen=True)
class Preemption:
    at: datetime
    job: str
    tasks: int
    by: str | None
    cause: str
    detail: str


def tree(entitlements: list[Entitlement]) -> list[tuple[Entitlement, int]]:
    """The entitlements depth first, roots and siblings by name, each with its depth; an
    entitlement whose parent is not shown is a root here."""
    names = {entitlement.name for entitlement in entitlements}
    children: dict[str | None, list[Entitlement]] = {}
    for entitlement in sorted(entitlements, key=lambda e: e.name):
        parent = entitlement.parent if entitlement.parent in names else None
        children.setdefault(parent, []).append(entitlement)
    ordered: list[tuple[Entitlement, int]] = []

    def visit(parent: str | None, depth: int) -> None:
        for child in children.get(parent, []):
            ordered.append((child, depth))
            visit(child.name, depth + 1)

    visit(None, 0)
    return ordered


@router.get("")
async def entitlements_page(
    store: ReadsDep, index: QueueIndexDep, principal: UiPrincipal, fragment: bool = False
) -> Response:
    """The tree and its queues, or (with `fragment`) the part that changes."""
    visible = [
        entitlement
        for entitlement in await records.scan(store, keys.ENTITLEMENTS, Entitlement)
        if can_see(principal, entitlement)
    ]
    used = await queues.uses(store)
    branches = []
    for entitlement, depth in tree(visible):
        total, waiting = await index.page(entitlement.name, 0, WAITING_SHOWN)
        found = used.get(entitlement.name)
        use = None if found is None else found[0]
        branches.append(Branch(entitlement, depth, use, waiting, total))
    names = {entitlement.name for entitlement in visible}
    admissions = await records.scan(store, keys.ADMISSIONS, Admission)
    preemptions = sorted(
        (
            Preemption(
                event.at,
                record.job,
                event.tasks,
                event.by,
                event.cause.value if event.cause else "",
                event.detail,
            )
            for record in admissions
            if record.job.split("/")[0] in names
            for event in record.history
            if event.kind is AdmissionEventKind.PREEMPTED
        ),
        key=lambda preemption: preemption.at,
        reverse=True,
    )[:PREEMPTIONS_SHOWN]
    return page(
        "_entitlements.html" if fragment else "entitlements.html",
        principal,
        branches=branches,
        preemptions=preemptions,
        resources=resources_text,
    )
