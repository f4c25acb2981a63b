"""/v1/jobs/{ent}/{job}/tasks: a job's tasks, and a task's logs fetched from its agent."""

from __future__ import annotations

import logging
from typing import Annotated

import httpx
from fastapi import APIRouter, Path, Query
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, JobName, problems
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement
from tether.frontend.deps import AgentsDep
from tether.frontend.problems import BadGateway, NotFound, Unavailable
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.tasks import TaskList, TaskView
from tether.model import AgentHeartbeat, LogStream, Task
from tether.store import keys

log = logging.getLogger(__name__)

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
    found = await records.get(store, keys.task(ent, job, index), Task)
    if found is None:
        if await store.get(keys.job(ent, job)) is None:
            raise NotFound(f"job '{ent}/{job}' does not exist")
        raise NotFound(f"job '{ent}/{job}' has no task {index}")
    task = found.model
    if task.machine is None:
        raise NotFound(
            f"task {task.task_id} has no machine yet (state '{task.state}'), so it has no logs"
        )
    heartbeat = await records.get(store, keys.heartbeat(task.machine), AgentHeartbeat)
    if heartbeat is None:
        raise Unavailable(
            f"the agent of machine '{task.machine}' is not heartbeating; its logs cannot be "
            "read until it is back"
        )
    address = heartbeat.model.address.rstrip("/")
    try:
        answer = await agents.get(
            f"{address}/v1/tasks/{ent}/{job}/{index}/logs",
            params={"stream": stream, "tail_bytes": tail_bytes, "attempt": task.attempt},
        )
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        log.warning("agent of %s at %s: %s", task.machine, address, exc)
        raise Unavailable(
            f"the agent of machine '{task.machine}' at {address} cannot be reached: "
            f"{str(exc) or type(exc).__name__}"
        ) from None
    if answer.status_code == 404:
        raise NotFound(_agent_detail(answer) or f"the agent has no {stream} log of this task")
    if answer.status_code != 200:
        raise BadGateway(
            f"the agent of machine '{task.machine}' answered {answer.status_code}: "
            f"{_agent_detail(answer)}"
        )
    return Response(answer.content, media_type="text/plain; charset=utf-8")


def _agent_detail(answer: httpx.Response) -> str:
    """The agent's explanation: a problem's `detail`, else the start of its body."""
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:300]
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail if isinstance(detail, str) else answer.text[:300]
