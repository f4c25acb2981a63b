"""/v1/events: what happens in the region, as Server-Sent Events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from starlette.responses import StreamingResponse

from tether.frontend.api import AUTH_PROBLEMS, problems, streamed
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement, principal_of
from tether.frontend.deps import CacheDep, EventsDep, SettingsDep, StoreDep
from tether.frontend.events.stream import (
    EVENT_STREAM,
    KIND_GROUPS,
    KIND_SELECTORS,
    EventFilter,
    check_kinds,
    response,
)
from tether.frontend.problems import FieldError, InvalidInput
from tether.frontend.schemas.events import EventGap
from tether.model import JobHandle, Name
from tether.model.event import RegionEvent, RegionSnapshot

router = APIRouter(prefix="/v1/events", tags=["events"], responses=AUTH_PROBLEMS)


@router.get(
    "",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "Server-Sent Events: each `data` a RegionEvent (JSON), the last of a "
            "revision with the revision as its `id`; `event: gap` (a problem) then `event: "
            "snapshot` (a RegionSnapshot) when the events asked for are no longer kept.",
            "content": streamed(EVENT_STREAM, RegionEvent, RegionSnapshot, EventGap),
        },
        **problems(404, 422),
    },
)
async def follow_events(
    request: Request,
    store: StoreDep,
    cache: CacheDep,
    hub: EventsDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    entitlement: Annotated[Name | None, Query(description="Only this entitlement's.")] = None,
    job: Annotated[JobHandle | None, Query(description="Only this job's.")] = None,
    machine: Annotated[Name | None, Query(description="Only this machine's.")] = None,
    kind: Annotated[
        list[str],
        Query(
            description=f"Only these kinds, or groups of kinds ({', '.join(KIND_GROUPS)}).",
            json_schema_extra={"items": {"type": "string", "enum": list(KIND_SELECTORS)}},
        ),
    ] = [],  # noqa: B006 (FastAPI copies defaults)
    follow: Annotated[
        bool, Query(description="Keep the stream open for new events; false ends it at once.")
    ] = True,
    since: Annotated[
        int | None,
        Query(
            ge=0,
            description="Events after this revision (as Last-Event-ID, which wins). 422 if it "
            "is after the store's revision.",
        ),
    ] = None,
    last_event_id: Annotated[
        str,
        Header(
            pattern=r"^[0-9]*$",
            description="The revision of the last event seen: the stream resumes after it "
            "(empty: none). 422 if it is after the store's revision.",
        ),
    ] = "",
) -> StreamingResponse:
    """Follow the region's events, in store order: jobs submitted, queued, admitted, preempted
    and deleted; tasks placed, started, exited, lost, restarted and preempted; TaskControl
    operations proposed, approved, done; machines' states; entitlements moved between shards.

    A principal sees the events of the entitlements it is a member of (a machine's, while an
    entitlement owns it); admins see all. Without Last-Event-ID or `since`, the stream starts
    now; with one, it starts after that revision. With `follow=false` it ends at the store's
    revision when asked, having told the events after the one given, or every event this
    frontend keeps."""
    try:
        kinds = check_kinds(kind)
    except ValueError as error:
        raise InvalidInput(str(error)) from None
    after = int(last_event_id) if last_event_id else since
    now = await store.revision()
    if after is not None and after > now:
        why = f"is after the store's revision ({now}): it names no event of this region"
        field = "last-event-id" if last_event_id else "since"
        raise InvalidInput(
            f"invalid request: {field}: {why}", errors=[FieldError(loc=[field], msg=why)]
        )
    for name in {entitlement, job.split("/")[0] if job else None} - {None}:
        await authorize_entitlement(store, principal, str(name))
    wanted = EventFilter(principal, entitlement, job, machine, kinds)
    token = request.headers["authorization"].partition(" ")[2].strip()
    subscription = await hub.subscribe(after, now, kept=not follow)
    return response(
        hub,
        subscription,
        wanted,
        until=None if follow else now,
        keepalive_s=settings.events_keepalive_s,
        recheck=lambda: principal_of(store, cache, token),
    )
