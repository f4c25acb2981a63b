"""/admin/rebalance/runs: ask the rebalancer for a round (a plan, or moves), and read it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from tether.frontend import rebalance
from tether.frontend.api import AUTH_PROBLEMS, problems, request_body
from tether.frontend.auth import CurrentPrincipal, require_admin
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, StoreDep
from tether.frontend.schemas.rebalance import RebalanceRequest, RebalanceRunList, RebalanceRunView
from tether.model import Identifier

router = APIRouter(prefix="/admin/rebalance/runs", tags=["admin"], responses=AUTH_PROBLEMS)

RunId = Annotated[Identifier, Path(description="The run's id.")]
_BODY = (
    'Plan only, or propose the moves, and with which strategies: {"dry_run": true, '
    '"strategies": ["spread", "idle"]}; both optional, the body too (a dry run of all).'
)


@router.post(
    "",
    status_code=201,
    response_model=RebalanceRunView,
    response_description="The run, pending: GET it until its state is done or failed.",
    responses=problems(400, 409, 413, 422),
    openapi_extra=request_body(RebalanceRequest, _BODY, required=False),
)
async def ask_for_run(
    request: Request, store: StoreDep, settings: SettingsDep, principal: CurrentPrincipal
) -> Response:
    """Admin: ask the rebalancer's leader for a round. A dry run plans the moves and their
    expected gain; otherwise the moves are proposed as MOVE operations, which each job's
    TaskController (or the built-in rule) approves as it sees fit. 409 while no rebalancer
    runs."""
    require_admin(principal)
    body = await read_body(request, settings.max_body_bytes)
    wanted = (
        parse_model(RebalanceRequest, body, request.headers.get("content-type"))
        if body.strip()
        else RebalanceRequest()
    )
    run = await rebalance.ask(store, wanted, principal, datetime.now(UTC))
    location = {"Location": f"/admin/rebalance/runs/{run.id}"}
    return RebalanceRunView.of(run).response(201, location)


@router.get("", response_model=RebalanceRunList)
async def list_runs(store: StoreDep, principal: CurrentPrincipal) -> Response:
    """Admin: the runs kept (the newest 100), newest first."""
    require_admin(principal)
    runs = [RebalanceRunView.of(run) for run in await rebalance.runs(store)]
    return RebalanceRunList(runs=runs).response()


@router.get("/{run_id}", response_model=RebalanceRunView, responses=problems(404))
async def get_run(store: StoreDep, principal: CurrentPrincipal, run_id: RunId) -> Response:
    """Admin: one run: pending, or done with its moves and the measures before and after, or
    failed with the reason."""
    require_admin(principal)
    return RebalanceRunView.of(await rebalance.run_of(store, run_id)).response()
