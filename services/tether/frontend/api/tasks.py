"""/v1/jobs/{ent}/{job}/tasks: a job's tasks, and a task's logs fetched from its agent."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, JobName, problems
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement
from tether.frontend.deps import AgentsDep
from tether.frontend.problems import NotFound
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.tasks import TaskList, TaskView
from tether.frontend.task_logs import task_log
from tether.model import LogStream
from tether.store import keys

router = APIRouter(prefix="/v1/jobs/{ent}/{job}/tasks", tags=["tasks"], responses=AUTH_PROBLEMS)

DEFAULT_TAIL_BYTES = 64 * 1024
"""What a logs request without `tail_bytes` reads (the SDK's DEFAULT_TAIL_BYTES is the same)."""
MAX_TAIL_BYTES = 16 * 1024 * 1024


@router.get("", response_model=TaskList, responses=problems(404))
async def list_tasks(
    store: ReadsDep, principal: CurrentPrincipal, ent: EntitlementName, job: JobName
) -> Response:
    """Every task of the job, by index, with its effective state."""
    await authorize_entitlement(store, principal, ent)
    if await store.get(keys.job(ent, job)) is None:
        raise NotFound(f"job '{ent}/{job}' does not exist")
    tasks, _ = await records.job_tasks(store, ent, job)
    return TaskList(tasks=[TaskView.of(task) for task in tasks]).response()


@router.get(
    "/{index}/logs",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}, "description": "The end of the log."},
        **problems(404, 502),
    },
)
async def task_logs(
    store: ReadsDep,
    agents: AgentsDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
    job: JobName,
    index: Annotated[int, Path(ge=0, description="The task's index in its job.")],
    stream: Annotated[LogStream, Query()] = LogStream.STDOUT,
    tail_bytes: Annotated[int, Query(ge=1, le=MAX_TAIL_BYTES)] = DEFAULT_TAIL_BYTES,
) -> Response:
    """The last `tail_bytes` of the task's current attempt's stdout or stderr, as its agent
    has them."""
    await authorize_entitlement(store, principal, ent)
    content = await task_log(store, agents, ent, job, index, stream, tail_bytes)
    return Response(content, media_type="text/plain; charset=utf-8")
