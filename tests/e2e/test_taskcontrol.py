"""TaskControl end to end: `tether up`, a controller written against the .proto file only (no
SDK), and a rolling update of which only the approved subset is executed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from typing import Any, Generic, TypeVar

import grpc
import httpx
import pytest

from tests.support.harness import LocalRegion, all_running, sleeper_job, tasks_of, wait_for
from tether.model import shard_for
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc
from tether.region.plan import SHARDS

APPROVED_TASKS = {0, 1}


class ProtoOnlyController(taskcontrol_pb2_grpc.TaskControllerServicer):
    """Approves update operations of tasks 0 and 1 only, and records every call; with `hang`,
    never answers at all."""

    def __init__(self, *, hang: bool = False) -> None:
        self.calls: list[pb.TaskControlRequest] = []
        self.hang = hang
        self.released = asyncio.Event()
        """Set when the controller shuts down: a hanging call then returns."""

    async def Process(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.TaskControlRequest,
        context: grpc.aio.ServicerContext[pb.TaskControlRequest, pb.TaskControlResponse],
    ) -> pb.TaskControlResponse:
        self.calls.append(request)
        if self.hang:
            await self.released.wait()
        return pb.TaskControlResponse(
            acknowledged_operation_ids=[
                operation.id
                for operation in request.pending_operations
                if {task.index for task in operation.tasks} <= APPROVED_TASKS
            ]
        )


C = TypeVar("C", bound=taskcontrol_pb2_grpc.TaskControllerServicer)


class ControllerThread(Generic[C]):
    """The controller's gRPC server and its registration, on an event loop of their own; it
    renews the registration every third of its TTL, as a controller must, however long the
    test takes."""

    def __init__(self, region: LocalRegion, job_handle: str, controller: C) -> None:
        self.controller = controller
        self._region = region
        self._job_handle = job_handle
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as error:  # reported by __exit__
            self._failed = error

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        server = grpc.aio.server()
        taskcontrol_pb2_grpc.add_TaskControllerServicer_to_server(self.controller, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        async with grpc.aio.insecure_channel(self._region.registry_address) as channel:
            registry = taskcontrol_pb2_grpc.TaskControllerRegistryStub(channel)
            metadata = (("authorization", f"Bearer {self._region.token}"),)
            registered = await registry.Register(
                pb.RegisterRequest(
                    job_handle=self._job_handle, endpoint=f"127.0.0.1:{port}", ttl_seconds=30
                ),
                metadata=metadata,
            )
            self._ready.set()
            renew = pb.RenewRequest(registration_id=registered.registration_id)
            while not self._stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(registered.ttl_seconds / 3):
                        await self._stopping.wait()
                if not self._stopping.is_set():
                    await registry.Renew(renew, metadata=metadata)
            if isinstance(self.controller, ProtoOnlyController):
                self.controller.released.set()
            await registry.Unregister(
                pb.UnregisterRequest(registration_id=registered.registration_id),
                metadata=metadata,
            )
        await server.stop(1)

    def __enter__(self) -> C:
        self._thread.start()
        assert self._ready.wait(30), f"the controller did not register: {self._failed!r}"
        return self.controller

    def __exit__(self, *_: object) -> None:
        assert self._stopping is not None
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(30)
        self._loop.close()
        if self._failed is not None:
            raise AssertionError("the controller failed") from self._failed


def running_job(client: httpx.Client, name: str, count: int) -> list[dict[str, Any]]:
    """Submits a sleeper job to `default` and returns its tasks once all of them run."""
    response = client.post("/v1/jobs", json=sleeper_job(name, count))
    assert response.status_code == 201, response.text
    handle = f"default/{name}"
    return wait_for(lambda: all_running(client, handle, count), timeout_s=60, what=handle)


def versions(client: httpx.Client, handle: str) -> dict[int, tuple[str, str, int | None]]:
    return {t["index"]: (t["version"], t["state"], t["pid"]) for t in tasks_of(client, handle)}


def test_only_the_operations_a_controller_approves_are_executed(region: LocalRegion) -> None:
    with region.client() as client:
        handle = "default/rolled"
        pids = {t["index"]: t["pid"] for t in running_job(client, "rolled", 4)}

        with ControllerThread(region, handle, ProtoOnlyController()) as controller:
            patched = client.patch(f"/v1/jobs/{handle}", json={"version": "2"})
            assert patched.status_code == 200, patched.text

            def approved_ones_updated() -> dict[int, tuple[str, str, int | None]] | None:
                now = versions(client, handle)
                done = all(now[i][:2] == ("2", "running") for i in APPROVED_TASKS)
                return now if done else None

            wait_for(approved_ones_updated, timeout_s=60, what="tasks 0 and 1 on version 2")
            # The others keep waiting for an approval that never comes: the scheduler asks
            # again every few seconds, and never restarts them.
            calls_then = len(controller.calls)
            wait_for(
                lambda: len(controller.calls) >= calls_then + 2,
                timeout_s=30,
                what="the scheduler asking again",
            )
            now = versions(client, handle)
            for index in (2, 3):
                assert now[index] == ("1", "running", pids[index])
            for index in APPROVED_TASKS:
                assert now[index][2] != pids[index]

            # The shard's leader dies: its standby takes over and asks on, counting up.
            shard = shard_for("default", list(SHARDS))
            leader = region.shard_leader(shard)
            assert leader is not None
            os.kill(leader.pid, signal.SIGKILL)
            wait_for(
                lambda: (now := region.shard_leader(shard)) is not None and now.pid != leader.pid,
                timeout_s=20,
                what="the standby to lead",
            )
            calls_then = len(controller.calls)
            wait_for(
                lambda: len(controller.calls) >= calls_then + 2,
                timeout_s=30,
                what="the new leader asking",
            )
            calls: list[Any] = list(controller.calls)
            numbers = [call.sequence_number for call in calls]
            assert numbers == sorted(set(numbers)), "sequence numbers strictly increase"
            last = calls[-1]
            assert {o.tasks[0].index for o in last.pending_operations} == {2, 3}
            assert {o.target_version for o in last.pending_operations} == {"2"}
            assert last.task_count == 4


def test_without_a_controller_the_cli_rolls_the_whole_job_a_task_at_a_time(
    region: LocalRegion,
) -> None:
    with region.client() as client:
        handle = "default/plain"
        before = running_job(client, "plain", 3)
        done = region.cli(
            *("job", "update", handle, "--version", "2", "--wait", "--timeout", "90"),
            timeout_s=120,
        )
        assert done.returncode == 0, done.stderr
        assert "all 3 tasks run version 2" in done.stdout
        after = {t["index"]: t for t in tasks_of(client, handle)}
        for task in before:
            updated = after[task["index"]]
            assert (updated["version"], updated["state"]) == ("2", "running")
            assert updated["pid"] != task["pid"]
            # An update is a new attempt on the same machine, not a restart after a failure.
            assert (updated["machine"], updated["restarts"]) == (task["machine"], 0)


def test_a_controller_that_never_answers_cannot_hold_up_a_failure_replacement(
    region: LocalRegion,
) -> None:
    with region.client() as client:
        handle = "default/stuck"
        pids = {t["index"]: t["pid"] for t in running_job(client, "stuck", 2)}

        with ControllerThread(region, handle, ProtoOnlyController(hang=True)) as controller:
            patched = client.patch(f"/v1/jobs/{handle}", json={"version": "2"})
            assert patched.status_code == 200, patched.text
            wait_for(lambda: controller.calls, timeout_s=30, what="a call to the controller")
            os.kill(pids[0], signal.SIGKILL)

            def replaced() -> dict[int, tuple[str, str, int | None]] | None:
                now = versions(client, handle)
                fresh = now[0][1] == "running" and now[0][2] not in (None, pids[0])
                return now if fresh else None

            now = wait_for(replaced, timeout_s=30, what="task 0 to run again")
            # A failure is no operation: the new attempt runs the job's version at once. Task 1
            # waits for an approval that never comes.
            assert now[0][0] == "2"
            assert now[1] == ("1", "running", pids[1])


def test_shrinking_a_controlled_job_stops_only_the_tasks_its_controller_lets_go(
    region: LocalRegion,
) -> None:
    with region.client() as client:
        handle = "default/shrunk"
        pids = {t["index"]: t["pid"] for t in running_job(client, "shrunk", 4)}

        with ControllerThread(region, handle, ProtoOnlyController()) as controller:
            # A restart of task 0 (approved) first: once the controller is called, the leader
            # knows of it, and the shrink below is a controlled one.
            asked = client.post(
                f"/v1/jobs/{handle}/operations", json={"kind": "restart", "tasks": [0]}
            )
            assert asked.status_code == 202, asked.text
            wait_for(lambda: controller.calls, timeout_s=30, what="a call to the controller")
            scaled = client.post(f"/v1/jobs/{handle}/scale", json={"count": 1})
            assert scaled.status_code == 200, scaled.text

            # Task 1's STOP is approved, so it goes; 2 and 3 wait for an approval that never
            # comes and keep running.
            wait_for(
                lambda: {t["index"] for t in tasks_of(client, handle)} == {0, 2, 3},
                timeout_s=30,
                what="task 1 stopped and removed",
            )
            calls_then = len(controller.calls)
            wait_for(
                lambda: len(controller.calls) >= calls_then + 2,
                timeout_s=30,
                what="the scheduler asking again",
            )
            now = {t["index"]: (t["state"], t["pid"]) for t in tasks_of(client, handle)}
            assert {i: now[i] for i in (2, 3)} == {i: ("running", pids[i]) for i in (2, 3)}
            last = controller.calls[-1]
            assert {o.kind for o in last.pending_operations} == {pb.OPERATION_KIND_STOP}
            assert {o.tasks[0].index for o in last.pending_operations} == {2, 3}
            assert last.task_count == 1

        # Without a controller the shrink completes at once.
        wait_for(
            lambda: [t["index"] for t in tasks_of(client, handle)] == [0],
            timeout_s=60,
            what="tasks 2 and 3 stopped once the controller is gone",
        )


def test_a_registration_lapses_unless_renewed_and_other_teams_cannot_register(
    region: LocalRegion,
) -> None:
    with region.client() as client:
        created = client.post("/admin/principals", json={"name": "outsider", "roles": []})
        assert created.status_code == 201, created.text
        outsider_token = created.json()["token"]

    async def exercise() -> None:
        async with grpc.aio.insecure_channel(region.registry_address) as channel:
            registry = taskcontrol_pb2_grpc.TaskControllerRegistryStub(channel)
            admin = (("authorization", f"Bearer {region.token}"),)
            outsider = (("authorization", f"Bearer {outsider_token}"),)
            request = pb.RegisterRequest(
                job_handle="default/anything", endpoint="127.0.0.1:9", ttl_seconds=3
            )
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await registry.Register(request, metadata=outsider)
            assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
            assert "default" in (refused.value.details() or "")

            registered = await registry.Register(request, metadata=admin)
            listing = pb.ListRequest(entitlement="default")
            ids = {
                r.registration_id
                for r in (await registry.List(listing, metadata=admin)).registrations
            }
            assert registered.registration_id in ids
            # Nobody renews it: its lease lapses within a few seconds of its 3 s TTL.
            for _ in range(50):
                await asyncio.sleep(0.2)
                listed = await registry.List(listing, metadata=admin)
                if registered.registration_id not in {
                    r.registration_id for r in listed.registrations
                }:
                    break
            else:
                raise AssertionError("the registration outlived its lease")
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await registry.Renew(
                    pb.RenewRequest(registration_id=registered.registration_id), metadata=admin
                )
            assert gone.value.code() is grpc.StatusCode.NOT_FOUND

    asyncio.run(exercise())
