"""The frontend's read cache (store/cache.py, frontend/revisions.py) on a real store: answers
name their revision and content, a client reads its own writes, `consistent=true` reads the
store, a gap in the watch lists again, and a frontend cut off from etcd stops answering from
what it held; a write that checks what it writes against the cache (set_resource) loses no
update to a copy behind the store, and confirms a refusal in the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from fastapi import FastAPI

from tests.integration.frontend.conftest import ADMIN, ALICE, MALLORY, job_spec, seed_region
from tests.support.allocator_builders import machine
from tests.support.waiting import eventually
from tether.frontend.app import create_app
from tether.frontend.settings import FrontendSettings
from tether.frontend.shard_counts import ShardCounts
from tether.model import (
    Entitlement,
    Job,
    PrincipalRecord,
    Task,
    TaskState,
    TaskStatus,
    from_json,
    to_json,
    token_digest,
)
from tether.model.ephemeral import EphemeralResource
from tether.service import HttpServer
from tether.store import Store, keys, open_store
from tether.store.cache import PrefixCopy, StoreCache
from tether.store.etcd_server import EtcdServer

READ_WAIT_S = 0.3
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Served:
    app: FastAPI
    api: httpx.AsyncClient

    @property
    def cache(self) -> StoreCache:
        cache: StoreCache = self.app.state.cache
        return cache

    @property
    def jobs_copy(self) -> PrefixCopy:
        copy = self.cache.copy_of(keys.JOBS)
        assert copy is not None
        return copy


@asynccontextmanager
async def served(store_url: str, cache_idle_s: float = 60.0) -> AsyncIterator[Served]:
    """A frontend app on its own store connection, with its lifespan (which runs the cache)."""
    settings = FrontendSettings(
        host="127.0.0.1", port=0, read_wait_s=READ_WAIT_S, cache_idle_s=cache_idle_s
    )
    async with open_store(store_url) as store:
        app = create_app(store, settings, ShardCounts(store, settings.shard_counts_wait_s))
        server = HttpServer(app, "127.0.0.1", 0, name="frontend")
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as api:
                served = Served(app, api)
                await eventually(lambda: served.cache.current, what="the cache to be listed")
                yield served
        finally:
            await server.stop()


async def submitted(api: httpx.AsyncClient, name: str) -> int:
    """Submits job team-a/`name`; the revision its answer names."""
    created = await api.post("/v1/jobs", json=job_spec(name), headers=ADMIN)
    assert created.status_code == 201, created.text
    return int(created.headers["x-tether-revision"])


async def holding(copy: PrefixCopy, revision: int) -> None:
    """Returns once `copy` follows the store with every change up to `revision` in it."""
    await eventually(
        lambda: copy.current and copy.revision >= revision, what=f"{copy.prefix} to hold it"
    )


async def rename_version(store: Store, name: str, version: str) -> int:
    """Changes job team-a/`name`'s package version in the store, behind the frontend's back;
    the revision of the write."""
    kv = await store.get(keys.job("team-a", name))
    assert kv is not None
    job = from_json(Job, kv.value, stored=True)
    task = job.spec.task.model_copy(update={"version": version})
    changed = job.model_copy(update={"spec": job.spec.model_copy(update={"task": task})})
    return await store.put(keys.job("team-a", name), to_json(changed))


def version_of(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    version: str = answer.json()["spec"]["task"]["version"]
    return version


async def test_answers_name_their_revision_and_an_unchanged_one_is_a_304(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    async with served(store_url) as frontend:
        api = frontend.api
        written = await submitted(api, "web")
        first = await api.get("/v1/jobs/team-a/web", headers=ADMIN)
        assert first.status_code == 200
        # This frontend's own write is in what it answers from next, for any client.
        assert int(first.headers["x-tether-revision"]) >= written
        tag = first.headers["etag"]
        again = await api.get("/v1/jobs/team-a/web", headers=ADMIN | {"If-None-Match": tag})
        assert again.status_code == 304
        assert (again.content, again.headers["etag"]) == (b"", tag)
        other = await api.get("/v1/jobs/team-a/web", headers=ADMIN | {"If-None-Match": '"x"'})
        assert other.status_code == 200
        scaled = await api.post("/v1/jobs/team-a/web/scale", json={"count": 3}, headers=ADMIN)
        assert int(scaled.headers["x-tether-revision"]) > written
        changed = await api.get("/v1/jobs/team-a/web", headers=ADMIN | {"If-None-Match": tag})
        assert changed.status_code == 200
        assert changed.headers["etag"] != tag
        assert changed.json()["spec"]["count"] == 3


async def test_a_client_reads_its_write_and_consistent_reads_the_store(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    async with served(store_url) as frontend:
        api = frontend.api
        await holding(frontend.jobs_copy, await submitted(api, "web"))
        # The copy of the jobs stops following the store: what it holds is now behind.
        await frontend.jobs_copy.stop()
        written = await rename_version(store, "web", "2.0")
        assert version_of(await api.get("/v1/jobs/team-a/web", headers=ADMIN)) == "1.0"
        consistent = await api.get("/v1/jobs/team-a/web?consistent=true", headers=ADMIN)
        assert version_of(consistent) == "2.0"
        assert int(consistent.headers["x-tether-revision"]) >= written
        # A reader that names the write's revision, which the copy has not reached, reads the
        # store.
        read_back = await api.get(f"/v1/jobs/team-a/web?min_revision={written}", headers=ADMIN)
        assert version_of(read_back) == "2.0"


async def put_status(store: Store, job: str, state: TaskState) -> int:
    """Writes the status of task 0 of team-a/`job`, behind the frontend's back; the write's
    revision."""
    status = TaskStatus(
        job=f"team-a/{job}", index=0, machine="m1", attempt=1, state=state, updated_at=NOW
    )
    return await store.put(keys.task_status("team-a", job, 0), to_json(status))


async def test_an_entitlements_tasks_are_followed_while_they_are_read(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    async with served(store_url, cache_idle_s=1.0) as frontend:
        api, cache = frontend.api, frontend.cache
        await submitted(api, "web")
        task = Task(job="team-a/web", index=0, generation=1, attempt=1, machine="m1",
                    state=TaskState.PLACED, version="1.0", updated_at=NOW)  # fmt: skip
        await store.put(keys.task("team-a", "web", 0), to_json(task))
        await put_status(store, "web", TaskState.STARTING)
        # Nobody read the tasks yet: the cache follows no entitlement's.
        assert cache.entitlements_followed == 0
        tasks_url = "/v1/jobs/team-a/web/tasks"

        def state_of(answer: httpx.Response) -> str:
            assert answer.status_code == 200, answer.text
            state: str = answer.json()["tasks"][0]["state"]
            return state

        # The first read comes from the store while the copy of team-a's tasks lists.
        assert state_of(await api.get(tasks_url, headers=ADMIN)) == "starting"
        statuses = cache.copy_of(keys.statuses_of("team-a", "web"))
        assert statuses is not None
        assert statuses.prefix == keys.TASK_STATUS + "team-a/"
        assert cache.entitlements_followed == 2  # its tasks and their statuses
        # Once the copy follows its watch (it holds a write made after its listing):
        await holding(statuses, await put_status(store, "web", TaskState.STARTING))
        # From the copy: held behind, it answers what it held; `consistent` reads the store.
        await statuses.stop()
        await put_status(store, "web", TaskState.RUNNING)
        assert state_of(await api.get(tasks_url, headers=ADMIN)) == "starting"
        consistent = await api.get(tasks_url + "?consistent=true", headers=ADMIN)
        assert state_of(consistent) == "running"
        # Unread for `cache_idle_s`, the entitlement is no longer followed; a read starts over.
        await eventually(
            lambda: cache.entitlements_followed == 0, timeout_s=10, what="team-a to be dropped"
        )
        assert state_of(await api.get(tasks_url, headers=ADMIN)) == "running"
        assert cache.entitlements_followed == 2


async def test_a_gap_in_the_watch_lists_again_and_serves_nothing_deleted_meanwhile(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    async with served(store_url) as frontend:
        api = frontend.api
        await submitted(api, "gone")
        await holding(frontend.jobs_copy, await submitted(api, "kept"))
        await frontend.cache.stop()
        await store.delete(keys.job("team-a", "gone"))
        changed = await rename_version(store, "kept", "3.0")
        await store.compact(changed)
        # Watching again from where it stopped finds that history compacted: it lists again.
        await frontend.cache.start()

        async def from_the_cache() -> httpx.Response:
            return await api.get("/v1/jobs", headers=ADMIN)

        await holding(frontend.jobs_copy, changed)
        listed = await from_the_cache()
        assert int(listed.headers["x-tether-revision"]) >= changed
        assert [job["spec"]["name"] for job in listed.json()["jobs"]] == ["kept"]
        assert version_of(await api.get("/v1/jobs/team-a/kept", headers=ADMIN)) == "3.0"
        assert (await api.get("/v1/jobs/team-a/gone", headers=ADMIN)).status_code == 404


async def test_a_frontend_cut_off_from_etcd_stops_answering_from_its_cache(
    etcd_server: EtcdServer,
) -> None:
    async with open_store(etcd_server.url) as store:
        await seed_region(store)
    async with served(etcd_server.url) as frontend:
        api = frontend.api
        await submitted(api, "web")
        etcd_server.kill()
        # Once its watch fails the cache is not the store's state: reads go to the store,
        # which cannot be reached (503), instead of answering what the cache held.
        answer = await eventually(
            lambda: api.get("/v1/jobs/team-a/web", headers=ADMIN),
            lambda answer: answer.status_code != 200,
            timeout_s=30,
            what="reads to stop coming from the cache",
        )
        assert answer.status_code == 503
        assert not frontend.cache.current
        await asyncio.to_thread(etcd_server.start)
        back = await eventually(
            lambda: api.get("/v1/jobs/team-a/web", headers=ADMIN),
            lambda answer: answer.status_code == 200,
            timeout_s=30,
            what="the frontend to answer again",
        )
        assert version_of(back) == "1.0"
        await submitted(api, "after")
        await eventually(lambda: frontend.cache.current, what="the cache to follow again")


# --- writes that check what they write against the cache ------------------------------------


def grant(machine_id: str) -> dict[str, Any]:
    """The body of a set_resource giving team-a's label `slot` on one machine."""
    return {
        "entitlement": "team-a",
        "label": "slot",
        "capacity": 2,
        "node_spec": {"machine": machine_id},
    }


def revision_of(answer: httpx.Response) -> int:
    assert answer.status_code == 200, answer.text
    return int(answer.headers["x-tether-revision"])


async def test_a_write_read_from_a_copy_behind_the_store_loses_no_update(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    for n in (1, 2, 3):
        await store.put(keys.machine(f"m{n}"), to_json(machine(f"m{n}", msb="msb1")))
    key = keys.ephemeral_resource("team-a", "slot")
    async with served(store_url) as frontend:
        api = frontend.api
        copy = frontend.cache.copy_of(key)
        assert copy is not None
        await holding(
            copy, revision_of(await api.post("/v1/resources", headers=ALICE, json=grant("m1")))
        )
        behind = copy.items[key]
        await holding(
            copy, revision_of(await api.post("/v1/resources", headers=ALICE, json=grant("m2")))
        )
        # As if the watch had not brought the second grant yet: the copy holds the first alone.
        copy.items[key] = behind
        third = await api.post("/v1/resources", headers=ALICE, json=grant("m3"))
        assert third.status_code == 200, third.text
        granted = {g["node_spec"]["machine"] for g in third.json()["grants"]}
        assert granted == {"m1", "m2", "m3"}
        stored = await store.get(key)
        assert stored is not None
        record = from_json(EphemeralResource, stored.value, stored=True)
        assert record.machine_grants() == {"m1": 2, "m2": 2, "m3": 2}


async def test_a_refusal_read_from_the_cache_is_confirmed_in_the_store(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    key = keys.entitlement("team-a")
    bob = {"Authorization": "Bearer bob-token"}
    async with served(store_url) as frontend:
        copy = frontend.cache.copy_of(key)
        assert copy is not None
        await holding(copy, await store.revision())
        before = copy.items[key]
        await store.put(
            keys.principal(token_digest("bob-token")), to_json(PrincipalRecord(name="bob"))
        )
        joined = from_json(Entitlement, before.value, stored=True)
        joined = joined.model_copy(update={"members": [*joined.members, "bob"]})
        await holding(copy, await store.put(key, to_json(joined)))
        # As if the watch had not brought bob's membership yet.
        copy.items[key] = before
        body = {"entitlement": "team-a", "label": "slot", "capacity": 1}
        answer = await frontend.api.post("/v1/resources", headers=bob, json=body)
        assert answer.status_code == 200, answer.text
        copy.items[key] = before
        submitted = await frontend.api.post("/v1/jobs", headers=bob, json=job_spec("bobs"))
        assert submitted.status_code == 201, submitted.text
        # A stranger is refused by the store as by the cache, and writes nothing.
        revision = await store.revision()
        refused = await frontend.api.post("/v1/resources", headers=MALLORY, json=body)
        assert refused.status_code == 403, refused.text
        assert await store.revision() == revision
