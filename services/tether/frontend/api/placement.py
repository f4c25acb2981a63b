"""/v1/jobs/{ent}/{job}/placement: an allocator's explanation of a job's placement."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from tether.allocator_calls import AllocatorRefused, AllocatorUnavailable
from tether.frontend.allocators import refusal_problem
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, JobName, problems
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement
from tether.frontend.deps import AllocatorsDep
from tether.frontend.problems import NotFound, Unavailable
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.placement import PlacementView
from tether.store import keys

router = APIRouter(
    prefix="/v1/jobs/{ent}/{job}/placement", tags=["placement"], responses=AUTH_PROBLEMS
)


@router.get("", response_model=PlacementView, responses=problems(400, 404, 409, 502))
async def explain_placement(
    store: ReadsDep,
    allocators: AllocatorsDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
    job: JobName,
) -> Response:
    """Why the job's tasks are placed where they are, or why they cannot be placed: how many
    machines each hard rule rejected, how many match each preference, and the machines that
    hold the job's tasks with their rank for one more task. Asks a live allocator replica;
    503 (with Retry-After) when none answers."""
    await authorize_entitlement(store, principal, ent)
    if await store.get(keys.job(ent, job)) is None:
        raise NotFound(f"job '{ent}/{job}' does not exist")
    try:
        explained = await allocators.explain(f"{ent}/{job}")
    except AllocatorUnavailable as exc:
        raise Unavailable(f"cannot explain the placement of '{ent}/{job}': {exc}") from None
    except AllocatorRefused as exc:
        raise refusal_problem(exc) from None
    return PlacementView.of(explained).response()
