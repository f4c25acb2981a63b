"""Task logs: the frontend fetches them from the agent named by the machine's heartbeat."""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.integration.frontend.conftest import ALICE, Region, http_server, job_spec
from tests.integration.frontend.problems import assert_problem
from tests.integration.frontend.test_views import machine
from tether.model import AgentHeartbeat, Task, TaskState, to_json
from tether.store import Store, keys

NOW = datetime.now(UTC)


async def agent_logs(request: Request) -> Response:
    """Like an agent's endpoint: index 3 has no log file; others echo what was asked."""
    params = request.query_params
    if request.path_params["index"] == "3":
        return JSONResponse({"detail": "no stdout log for attempt 1"}, status_code=404)
    if request.path_params["index"] == "4":
        return PlainTextResponse("disk on fire", status_code=500)
    ask = request.path_params | dict(params)
    return PlainTextResponse(
        f"{ask['ent']}/{ask['job']}/{ask['index']} {ask['stream']} "
        f"attempt={ask['attempt']} tail={ask['tail_bytes']}\n"
    )


AGENT = Starlette(routes=[Route("/v1/tasks/{ent}/{job}/{index}/logs", agent_logs)])


async def seed(store: Store, agent_url: str) -> None:
    def task(index: int, machine_id: str | None = None, attempt: int = 1) -> Task:
        return Task(
            job="team-a/web",
            index=index,
            generation=1,
            attempt=attempt if machine_id else 0,
            machine=machine_id,
            state=TaskState.PLACED if machine_id else TaskState.PENDING,
            version="1.0",
            updated_at=NOW,
        )

    # 0: on m1 at attempt 2; 1: pending; 2: on m2, which has no heartbeat; 3 and 4: on m1,
    # whose agent answers 404 and 500 for them; 5: on m3, whose agent is not listening.
    tasks = [
        task(0, "m1", attempt=2),
        task(1),
        task(2, "m2"),
        task(3, "m1"),
        task(4, "m1"),
        task(5, "m3"),
    ]
    for record in tasks:
        await store.put(keys.task("team-a", "web", record.index), to_json(record))
    for machine_id, address in (("m1", agent_url), ("m3", "http://127.0.0.1:9")):
        heartbeat = AgentHeartbeat(
            machine=machine(machine_id), address=address, pid=1, started_at=NOW
        )
        await store.put(keys.heartbeat(machine_id), to_json(heartbeat))


async def test_logs_come_from_the_agent(region: Region) -> None:
    api = region.api
    assert (await api.post("/v1/jobs", headers=ALICE, json=job_spec())).is_success
    async with http_server(AGENT) as agent_url:
        await seed(region.store, agent_url)
        logs = "/v1/jobs/team-a/web/tasks/{}/logs"

        stdout = await api.get(logs.format(0), headers=ALICE)
        assert stdout.status_code == 200, stdout.text
        assert stdout.headers["content-type"].startswith("text/plain")
        assert stdout.text == "team-a/web/0 stdout attempt=2 tail=65536\n"
        stderr = await api.get(
            logs.format(0), headers=ALICE, params={"stream": "stderr", "tail_bytes": 10}
        )
        assert stderr.text == "team-a/web/0 stderr attempt=2 tail=10\n"

        assert_problem(await api.get(logs.format(1), headers=ALICE), 404, "no machine yet")
        assert_problem(await api.get(logs.format(2), headers=ALICE), 503, "not heartbeating")
        assert_problem(await api.get(logs.format(3), headers=ALICE), 404, "no stdout log")
        assert_problem(await api.get(logs.format(4), headers=ALICE), 502, "500", "disk on fire")
        assert_problem(await api.get(logs.format(5), headers=ALICE), 503, "cannot be reached")
        assert_problem(await api.get(logs.format(9), headers=ALICE), 404, "has no task 9")
        missing_job = await api.get("/v1/jobs/team-a/nope/tasks/0/logs", headers=ALICE)
        assert_problem(missing_job, 404, "job 'team-a/nope' does not exist")
        bad_stream = await api.get(logs.format(0), headers=ALICE, params={"stream": "stdin"})
        assert assert_problem(bad_stream, 422)["errors"][0]["loc"] == ["query", "stream"]
        bad_tail = await api.get(logs.format(0), headers=ALICE, params={"tail_bytes": 0})
        assert_problem(bad_tail, 422)
