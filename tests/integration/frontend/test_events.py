"""GET /v1/events on a real store and frontend: a job followed from submission to deletion, in
store order; members see only their entitlements'; a follower resumes after its last event; one
that asks for events a compaction removed gets an error and the state now; bad input is a 4xx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime
from typing import Any

import httpx

from tests.integration.frontend.conftest import (
    ADMIN,
    ALICE,
    MALLORY,
    QUOTA,
    Region,
    job_spec,
    seed_region,
    serving,
)
from tests.support.waiting import eventually
from tether.frontend.settings import FrontendSettings
from tether.model import (
    Entitlement,
    PrincipalRecord,
    Quota,
    Task,
    TaskState,
    TaskStatus,
    to_json,
    token_digest,
)
from tether.sdk.events import ServerSentEvent, SseParser
from tether.store import Store, keys

Headers = dict[str, str]


class Follower:
    """The messages one stream brought so far, and the last id it was told (its position)."""

    def __init__(self) -> None:
        self.messages: list[ServerSentEvent] = []
        self.parser = SseParser()
        self.ended = asyncio.Event()

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(m.data) for m in self.messages if m.event == "message"]

    def kinds(self) -> list[str]:
        return [event["kind"] for event in self.events()]

    async def saw(self, kind: str, job: str | None = None) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next(
                (e for e in self.events() if e["kind"] == kind and job in (None, e["job"])), None
            )

        seen: dict[str, Any] = await eventually(found, what=f"{kind} of {job}")
        return seen


@asynccontextmanager
async def following(
    api: httpx.AsyncClient, headers: Headers, **params: Any
) -> AsyncIterator[Follower]:
    """Follows the stream in the background from once the frontend answered its headers (it
    has subscribed by then)."""
    follower = Follower()
    answered = asyncio.get_running_loop().create_future()

    async def read() -> None:
        request = api.build_request("GET", "/v1/events", params=params, headers=headers)
        response = await api.send(request, stream=True)
        answered.set_result(response.status_code)
        try:
            async for line in response.aiter_lines():
                message = follower.parser.feed(line)
                if message is not None:
                    follower.messages.append(message)
        finally:
            follower.ended.set()
            await response.aclose()

    reading = asyncio.create_task(read())
    try:
        assert await asyncio.wait_for(answered, 10) == 200
        yield follower
    finally:
        reading.cancel()
        with suppress(asyncio.CancelledError):
            await reading


async def submit(region: Region, headers: Headers, **spec: Any) -> str:
    answer = await region.api.post("/v1/jobs", json=job_spec(**spec), headers=headers)
    assert answer.status_code == 201, answer.text
    handle: str = answer.json()["handle"]
    return handle


async def run_task(region: Region, handle: str, index: int, machine: str) -> None:
    """Writes what the scheduler and the agent would: the task placed, then running."""
    entitlement, job = handle.split("/")
    now = datetime.now(UTC)
    task = Task(
        job=handle,
        index=index,
        generation=1,
        attempt=1,
        machine=machine,
        state=TaskState.PLACED,
        version="1.0",
        updated_at=now,
    )
    await region.store.put(keys.task(entitlement, job, index), to_json(task))
    status = TaskStatus(
        job=handle,
        index=index,
        machine=machine,
        attempt=1,
        state=TaskState.RUNNING,
        pid=4242,
        started_at=now,
        updated_at=now,
    )
    await region.store.put(keys.task_status(entitlement, job, index), to_json(status))


async def test_a_job_from_submission_to_deletion_in_store_order(region: Region) -> None:
    async with following(region.api, ADMIN) as follower:
        handle = await submit(region, ALICE)
        await run_task(region, handle, 0, "m1")
        assert (await region.api.delete(f"/v1/jobs/{handle}", headers=ALICE)).status_code == 202
        # The scheduler deletes the record once every task stopped.
        await region.store.delete(keys.job(*handle.split("/")))
        await follower.saw("job.deleted", handle)
    ours = [event for event in follower.events() if event["job"] == handle]
    assert [event["kind"] for event in ours] == [
        "job.submitted",
        "job.queued",
        "task.placed",
        "task.started",
        "job.deleting",
        "job.deleted",
    ]
    started = ours[3]
    assert (started["task"], started["machine"], started["detail"]) == (0, "m1", "pid 4242")
    revisions = [event["revision"] for event in ours]
    assert revisions == sorted(revisions)
    # The last event of each revision carries it as its id, for Last-Event-ID.
    ids = {int(m.id) for m in follower.messages if m.id is not None}
    assert set(revisions) <= ids


async def test_members_see_only_their_entitlements_events(region: Region) -> None:
    async with following(region.api, ALICE) as alice:
        theirs = await submit(region, MALLORY, name="b-job", entitlement="team-b")
        ours = await submit(region, ALICE)
        # Events come in store order: the later one seen, the earlier one would have been.
        await alice.saw("job.submitted", ours)
    assert {event["entitlement"] for event in alice.events()} == {"team-a"}
    assert theirs not in {event["job"] for event in alice.events()}
    refused = await region.api.get("/v1/events", params={"entitlement": "team-b"}, headers=ALICE)
    assert refused.status_code == 403
    assert "team-b" in refused.json()["detail"]


async def test_a_membership_granted_while_following_shows_the_events_from_then(
    region: Region,
) -> None:
    async with following(region.api, MALLORY, kind="job.submitted") as mallory:
        before = await submit(region, ALICE, name="before")
        grown = Entitlement(
            name="team-a", quota=Quota(resources=QUOTA), members=["alice", "mallory"]
        )
        await region.store.put(keys.entitlement("team-a"), to_json(grown))
        after = await submit(region, ALICE, name="after")
        await mallory.saw("job.submitted", after)
    assert [event["job"] for event in mallory.events()] == [after]
    assert before != after


async def test_filters_select_by_job_and_kind(region: Region) -> None:
    async with following(region.api, ADMIN, job="team-a/web", kind=["task"]) as follower:
        other = await submit(region, ALICE, name="other")
        await run_task(region, other, 0, "m1")
        handle = await submit(region, ALICE)
        await run_task(region, handle, 0, "m2")
        await follower.saw("task.started", handle)
    assert follower.kinds() == ["task.placed", "task.started"]


async def test_a_follower_resumes_after_its_last_event(region: Region) -> None:
    async with following(region.api, ADMIN, kind="job") as first:
        await submit(region, ALICE, name="one")
        await first.saw("job.queued", "team-a/one")
    last_id = [m.id for m in first.messages if m.id is not None][-1]
    await submit(region, ALICE, name="two")
    async with following(region.api, ADMIN | {"Last-Event-ID": last_id}, kind="job") as again:
        await again.saw("job.queued", "team-a/two")
    assert [event["job"] for event in again.events()] == ["team-a/two", "team-a/two"]
    assert min(event["revision"] for event in again.events()) > int(last_id)


async def test_a_follower_that_saw_no_event_yet_resumes_from_its_position(
    region: Region,
) -> None:
    async with following(region.api, ADMIN, job="team-a/later") as quiet:
        await submit(region, ALICE, name="other")
        await eventually(lambda: quiet.parser.last_id, what="the stream's position")
    position = quiet.parser.last_id
    assert position is not None
    assert quiet.events() == []
    later = await submit(region, ALICE, name="later")
    async with following(region.api, ADMIN | {"Last-Event-ID": position}, job=later) as again:
        await again.saw("job.submitted", later)


async def test_a_token_deleted_while_following_ends_the_stream(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    await store.put(
        keys.principal(token_digest("short-lived")), to_json(PrincipalRecord(name="temp"))
    )
    settings = FrontendSettings(host="127.0.0.1", port=0, events_keepalive_s=0.2)
    async with (
        serving(store_url, settings) as api,
        following(api, {"Authorization": "Bearer short-lived"}) as follower,
    ):
        assert not follower.ended.is_set()
        await store.delete(keys.principal(token_digest("short-lived")))
        async with asyncio.timeout(10):
            await follower.ended.wait()


async def test_without_follow_the_kept_events_and_an_end(region: Region) -> None:
    async with following(region.api, ADMIN) as follower:
        handle = await submit(region, ALICE)
        await follower.saw("job.queued", handle)
    since = follower.events()[0]["revision"] - 1
    answer = await region.api.get(
        "/v1/events", params={"follow": "false", "since": since}, headers=ADMIN, timeout=10
    )
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    told = [json.loads(m.data) for m in SseParser().parse(answer.text.splitlines())]
    assert [event["kind"] for event in told] == ["job.submitted", "job.queued"]


async def test_events_a_compaction_removed_are_an_error_then_the_state(region: Region) -> None:
    handle = await submit(region, ALICE)
    seen = await region.store.revision()
    await run_task(region, handle, 0, "m1")
    await region.store.compact(await region.store.revision())
    async with following(region.api, ADMIN | {"Last-Event-ID": str(seen)}) as follower:
        later = await submit(region, ALICE, name="later")
        await follower.saw("job.submitted", later)
    gap, snapshot = follower.messages[:2]
    assert gap.event == "gap"
    problem = json.loads(gap.data)
    assert (problem["status"], problem["last_event_id"]) == (410, seen)
    assert f"after revision {seen} are no longer kept" in problem["detail"]
    assert snapshot.event == "snapshot"
    state = json.loads(snapshot.data)
    assert snapshot.id == str(state["revision"])
    running = [o for o in state["objects"] if o["what"] == "task-status" and o["job"] == handle]
    assert [(o["task"], o["state"], o["machine"]) for o in running] == [(0, "running", "m1")]
    # Then the events after the snapshot, none from before it.
    assert all(event["revision"] > state["revision"] for event in follower.events())


async def test_bad_input_is_a_problem_that_names_it(region: Region) -> None:
    for params, headers, named in (
        ({"kind": "nope"}, ADMIN, "unknown event kind 'nope'"),
        ({}, ADMIN | {"Last-Event-ID": "yesterday"}, "last-event-id"),
        ({"job": "no-slash"}, ADMIN, "job"),
        ({"since": "-1"}, ADMIN, "since"),
        ({"since": "999999999"}, ADMIN, "since: is after the store's revision"),
    ):
        answer = await region.api.get("/v1/events", params=params, headers=headers)
        assert answer.status_code == 422, (params, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert named in answer.text, answer.text
    missing = await region.api.get("/v1/events", params={"entitlement": "nobody"}, headers=ADMIN)
    assert missing.status_code == 404
