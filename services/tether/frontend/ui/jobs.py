"""The dashboard's jobs: a list to filter, sort and page through, and each job with its tasks,
operations and admission history."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final, Literal

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from tether.allocator_calls import AllocatorRefused, AllocatorUnavailable
from tether.frontend import jobs, records
from tether.frontend.api import EntitlementName, JobName
from tether.frontend.api.tasks import DEFAULT_TAIL_BYTES
from tether.frontend.auth import authorize_entitlement, visible_entitlements
from tether.frontend.deps import AgentsDep, AllocatorsDep
from tether.frontend.operations import job_operations
from tether.frontend.problems import NotFound
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.jobs import JobView
from tether.frontend.schemas.placement import PlacementView
from tether.frontend.schemas.tasks import TaskView
from tether.frontend.task_logs import task_log
from tether.frontend.ui.render import page
from tether.frontend.ui.session import UiPrincipal
from tether.model import Job, LogStream
from tether.model.admission import AdmissionState
from tether.store import keys

router = APIRouter(prefix="/ui/jobs", include_in_schema=False)

PAGE_SIZE: Final = 50
Sort = Literal["handle", "created", "running", "state"]


def job_state(job: JobView) -> str:
    """One word for the list: deleting, suspended, queued, preempting, running, starting or
    pending."""
    if job.deleting:
        return "deleting"
    if job.spec.suspended:
        return "suspended"
    if job.admission is not None and job.admission.state is not AdmissionState.ADMITTED:
        return job.admission.state.value
    if job.running >= job.count:
        return "running"
    return "starting" if job.running else "pending"


@dataclass(frozen=True)
class JobFilter:
    """What the list shows: the filter form's fields."""

    entitlement: str = ""
    state: str = ""
    kind: str = ""
    text: str = ""
    sort: Sort = "handle"
    page: int = 1

    def selects(self, job: JobView) -> bool:
        return (
            (not self.entitlement or job.entitlement == self.entitlement)
            and (not self.state or job_state(job) == self.state)
            and (not self.kind or job.spec.kind.value == self.kind)
            and self.text.lower() in job.handle.lower()
        )

    def ordered(self, found: list[JobView]) -> list[JobView]:
        if self.sort == "created":
            return sorted(found, key=lambda job: job.created_at, reverse=True)
        if self.sort == "running":
            return sorted(found, key=lambda job: (-job.running, job.handle))
        if self.sort == "state":
            return sorted(found, key=lambda job: (job_state(job), job.handle))
        return sorted(found, key=lambda job: job.handle)


FilterQuery = Annotated[str, Query(max_length=200)]


async def _listing(
    store: ReadsDep, principal: UiPrincipal, wanted: JobFilter
) -> tuple[list[JobView], int, list[str]]:
    """The page of jobs the filter selects, how many it selects, and the entitlements seen."""
    visible = None if principal.is_admin else await visible_entitlements(store, principal)
    found = [job for job in await jobs.job_views(store, None, visible) if wanted.selects(job)]
    shown = wanted.ordered(found)[(wanted.page - 1) * PAGE_SIZE : wanted.page * PAGE_SIZE]
    entitlements = sorted(visible) if visible is not None else await _all_entitlements(store)
    return shown, len(found), entitlements


async def _all_entitlements(store: ReadsDep) -> list[str]:
    return sorted(keys.last_segment(kv.key) for kv in (await store.range(keys.ENTITLEMENTS)).kvs)


@router.get("")
async def list_page(
    store: ReadsDep,
    principal: UiPrincipal,
    entitlement: FilterQuery = "",
    state: FilterQuery = "",
    kind: FilterQuery = "",
    text: FilterQuery = "",
    sort: Sort = "handle",
    page_number: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
    fragment: bool = False,
) -> Response:
    """The jobs page, or (with `fragment`) its table alone, as the filter form and the live
    refresh ask for it."""
    wanted = JobFilter(entitlement, state, kind, text, sort, page_number)
    shown, total, entitlements = await _listing(store, principal, wanted)
    template = "_jobs.html" if fragment else "jobs.html"
    return page(
        template,
        principal,
        jobs=shown,
        total=total,
        wanted=wanted,
        pages=max(1, -(-total // PAGE_SIZE)),
        entitlements=entitlements,
        state_of=job_state,
        states=("running", "starting", "pending", "queued", "preempting", "suspended", "deleting"),
    )


@router.get("/{ent}/{job}/placement")
async def placement(
    store: ReadsDep,
    allocators: AllocatorsDep,
    principal: UiPrincipal,
    ent: EntitlementName,
    job: JobName,
) -> Response:
    """Where an allocator would place the job's tasks now, and why (`job explain`), as a part
    of its page; what keeps it from answering, said in its place."""
    await authorize_entitlement(store, principal, ent)
    try:
        view, problem = PlacementView.of(await allocators.explain(f"{ent}/{job}")), ""
    except (AllocatorUnavailable, AllocatorRefused) as exc:
        view, problem = None, str(exc)
    return page("_placement.html", principal, placement=view, problem=problem)


@router.get("/{ent}/{job}/tasks/{index}/logs")
async def task_log_page(
    store: ReadsDep,
    agents: AgentsDep,
    principal: UiPrincipal,
    ent: EntitlementName,
    job: JobName,
    index: Annotated[int, Path(ge=0)],
    stream: LogStream = LogStream.STDOUT,
) -> Response:
    """The end of the task's log, as `GET /v1/jobs/{ent}/{job}/tasks/{index}/logs` answers."""
    await authorize_entitlement(store, principal, ent)
    content = await task_log(store, agents, ent, job, index, stream, DEFAULT_TAIL_BYTES)
    return Response(content, media_type="text/plain; charset=utf-8")


@router.get("/{ent}/{job}")
async def job_page(
    store: ReadsDep,
    principal: UiPrincipal,
    ent: EntitlementName,
    job: JobName,
    fragment: bool = False,
) -> Response:
    """One job: its spec, tasks, open operations and admission history; `fragment`: the parts
    that change, for the live refresh."""
    await authorize_entitlement(store, principal, ent)
    record = await records.get(store, keys.job(ent, job), Job)
    if record is None:
        raise NotFound(f"job '{ent}/{job}' does not exist")
    view = await jobs.job_view(store, record.model)
    tasks, _ = await records.job_tasks(store, ent, job)
    operations = await job_operations(store, ent, job)
    return page(
        "_job.html" if fragment else "job.html",
        principal,
        job=view,
        state=job_state(view),
        tasks=[TaskView.of(task) for task in tasks],
        operations=operations,
    )
