"""/v1/queues: every entitlement's use of its tree's quota, and one entitlement's queue."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Final

from fastapi import APIRouter, Query
from starlette.responses import Response

from tether.frontend import queues
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, problems
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement, visible_entitlements
from tether.frontend.deps import QueueIndexDep
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.queues import QueueList, QueueView

DEFAULT_QUEUE_PAGE: Final = 1000
MAX_QUEUE_PAGE: Final = 10_000

router = APIRouter(prefix="/v1/queues", tags=["queues"], responses=AUTH_PROBLEMS)


@router.get("", response_model=QueueList)
async def list_queues(store: ReadsDep, principal: CurrentPrincipal) -> Response:
    """What each entitlement the principal may see reserves, borrows and lends, and how many
    of its jobs wait, as its tree's decider last reported (every few seconds)."""
    visible = await visible_entitlements(store, principal)
    found = await queues.uses(store)
    return QueueList(
        queues=[found[name][0] for name in sorted(visible) if name in found]
    ).response()


@router.get("/{ent}", response_model=QueueView, responses=problems(404, 503))
async def get_queue(
    store: ReadsDep,
    index: QueueIndexDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
    offset: Annotated[int, Query(ge=0, description="Jobs to skip from the head.")] = 0,
    limit: Annotated[
        int, Query(ge=1, le=MAX_QUEUE_PAGE, description="The most jobs to answer.")
    ] = DEFAULT_QUEUE_PAGE,
) -> Response:
    """The entitlement's waiting jobs in the order it admits them (priority, start deadline,
    submission), a page at a time, each with its position, how long it has waited and what it
    asks for, and its use. The order is this frontend's view of the admission records, a few
    milliseconds behind the store."""
    await authorize_entitlement(store, principal, ent)
    body = await queues.queue(store, index, ent, offset, limit, datetime.now(UTC))
    return Response(body, media_type="application/json")
