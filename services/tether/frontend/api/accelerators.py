"""/v1/accelerator-reports: what each entitlement's Gavel runner did in its last round."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Request
from starlette.responses import Response

from tether.frontend.accelerators import accelerator_reports
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, problems, request_body
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement, visible_entitlements
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, StoreDep
from tether.frontend.problems import Conflict
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas import json_response
from tether.frontend.schemas.accelerators import AcceleratorReportList
from tether.model import to_json
from tether.model.accelerator import AcceleratorReport, AcceleratorRound
from tether.store import Put, key_exists, key_missing, keys

router = APIRouter(prefix="/v1/accelerator-reports", tags=["accelerators"], responses=AUTH_PROBLEMS)


@router.get("", response_model=AcceleratorReportList)
async def list_accelerator_reports(store: ReadsDep, principal: CurrentPrincipal) -> Response:
    """The last round each Gavel runner reported, for the entitlements the principal belongs
    to (all for admins)."""
    visible = None if principal.is_admin else await visible_entitlements(store, principal)
    return AcceleratorReportList(
        accelerator_reports=await accelerator_reports(store, visible)
    ).response()


@router.put(
    "/{ent}",
    response_model=AcceleratorReport,
    responses=problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(
        AcceleratorRound, "The round: the policy, the accelerators and each job's shares."
    ),
)
async def put_accelerator_report(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
) -> Response:
    """A member of the entitlement (its Gavel runner, `tether appsched gavel`): replace the
    entitlement's report with this round's."""
    await authorize_entitlement(store, principal, ent)
    body = await read_body(request, settings.max_body_bytes)
    reported = parse_model(AcceleratorRound, body, request.headers.get("content-type"))
    report = AcceleratorReport(
        **reported.model_dump(), entitlement=ent, updated_at=datetime.now(UTC)
    )
    # Not into an entitlement deleted meanwhile, as a throughput profile.
    written = await store.txn(
        [key_exists(keys.entitlement(ent)), key_missing(keys.entitlement_deletion(ent))],
        [Put(keys.accelerator_report(ent), to_json(report))],
    )
    if not written.succeeded:
        raise Conflict(f"entitlement '{ent}' is being deleted")
    return json_response(report)
