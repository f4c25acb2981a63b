"""A task's log, fetched from the agent of the machine it runs on (the API and the dashboard)."""

from __future__ import annotations

import logging

import httpx

from tether.frontend import records
from tether.frontend.problems import BadGateway, NotFound, Unavailable
from tether.model import AgentHeartbeat, LogStream, Task
from tether.store import Store, keys

log = logging.getLogger(__name__)


async def task_log(
    store: Store,
    agents: httpx.AsyncClient,
    ent: str,
    job: str,
    index: int,
    stream: LogStream,
    tail_bytes: int,
) -> bytes:
    """The last `tail_bytes` of the task's current attempt's stdout or stderr, as its agent has
    them: 404 for a task (or a log) that is not there, 503 when its agent cannot be reached,
    502 when it answers something else."""
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
    return answer.content


def _agent_detail(answer: httpx.Response) -> str:
    """The agent's explanation: a problem's `detail`, else the start of its body."""
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:300]
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail if isinstance(detail, str) else answer.text[:300]
