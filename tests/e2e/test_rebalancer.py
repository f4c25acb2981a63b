"""The rebalancer end to end, with `tether up`, real agents and task processes: a job packed
into one MSB while the others drained is spread again once they are back, through a controller
that lets one task go down at a time, and never with more than one of its tasks down."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from tests.e2e.test_maintenance import machine_states
from tests.e2e.test_taskcontrol import ControllerThread, running_job
from tests.support.harness import LocalRegion, get_json, tasks_of, wait_for
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc

COUNT = 4
HANDLE = "default/packed"


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    # Three moves of a job in one round: only its controller keeps them one at a time.
    running = LocalRegion(
        tmp_path_factory.mktemp("region") / "tether",
        extra_env={"TETHER_REBALANCER_MAX_MOVES_PER_JOB": "3"},
    )
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


class OneAtATime(taskcontrol_pb2_grpc.TaskControllerServicer):
    """Approves one pending operation at a time, and only while every task of the job runs and
    the last one it approved is done: its job is never more than one task short."""

    def __init__(self) -> None:
        self.approved: list[str] = []
        self.done: set[str] = set()
        self.most_down = 0
        """The most tasks reported unhealthy in one call."""
        self._lock = threading.Lock()

    async def Process(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.TaskControlRequest,
        context: grpc.aio.ServicerContext[pb.TaskControlRequest, pb.TaskControlResponse],
    ) -> pb.TaskControlResponse:
        with self._lock:
            self.done |= {operation.id for operation in request.completed_operations}
            self.most_down = max(self.most_down, len(request.all_unhealthy_tasks))
            busy = any(approved not in self.done for approved in self.approved)
            if busy or request.all_unhealthy_tasks or not request.pending_operations:
                return pb.TaskControlResponse()
            chosen = request.pending_operations[0].id
            self.approved.append(chosen)
        return pb.TaskControlResponse(acknowledged_operation_ids=[chosen])


def test_a_packed_job_is_spread_again_one_task_at_a_time(region: LocalRegion) -> None:
    with region.client() as client:
        machines = sorted(machine_states(client))
        keep, others = machines[0], machines[1:]
        for machine in others:
            drained = region.cli("machine", "drain", machine)
            assert drained.returncode == 0, drained.stderr
        wait_for(
            lambda: all(machine_states(client)[m] == "draining" for m in others),
            timeout_s=20,
            what="three machines draining",
        )
        # Only one machine takes tasks: the spread over MSBs cannot be kept.
        packed = running_job(client, "packed", COUNT)
        assert {task["machine"] for task in packed} == {keep}
        for machine in others:
            undrained = region.cli("machine", "undrain", machine)
            assert undrained.returncode == 0, undrained.stderr
        wait_for(
            lambda: all(state == "up" for state in machine_states(client).values()),
            timeout_s=20,
            what="every machine up again",
        )

        planned = region.cli("rebalance", "plan")
        assert planned.returncode == 0, planned.stderr
        assert "would move 3 tasks" in planned.stdout, planned.stdout
        [plan] = get_json(client, "/admin/rebalance/runs")["runs"]
        assert {(m["job"], m["source"], m["strategy"]) for m in plan["moves"]} == {
            (HANDLE, keep, "spread")
        }
        assert len({m["target"] for m in plan["moves"]}) == 3
        assert (plan["before"]["spread"], plan["after"]["spread"]) == (3, 0)
        # A plan moves nothing.
        assert {t["pid"] for t in tasks_of(client, HANDLE)} == {t["pid"] for t in packed}

        controller = OneAtATime()
        with ControllerThread(region, HANDLE, controller):
            ran = region.cli("rebalance", "run")
            assert ran.returncode == 0, ran.stderr
            assert "moves 3 tasks" in ran.stdout
            fewest_running = COUNT

            def spread() -> list[dict[str, object]] | None:
                nonlocal fewest_running
                tasks = tasks_of(client, HANDLE)
                running = [t for t in tasks if t["state"] == "running"]
                fewest_running = min(fewest_running, len(running))
                machines_used = {t["machine"] for t in running}
                return tasks if len(running) == COUNT and len(machines_used) == COUNT else None

            moved = wait_for(spread, timeout_s=90, what="the job spread over four machines")
        assert len(controller.approved) == 3, controller.approved
        assert controller.most_down <= 1
        assert fewest_running >= COUNT - 1, "two tasks of the job were down at once"
        stayed = [t for t in moved if t["machine"] == keep]
        assert len(stayed) == 1
        assert stayed[0]["pid"] in {t["pid"] for t in packed}, (
            "the task left in place never stopped"
        )

        again = region.cli("rebalance", "plan", "--strategy", "spread")
        assert again.returncode == 0, again.stderr
        assert "would move 0 tasks" in again.stdout
