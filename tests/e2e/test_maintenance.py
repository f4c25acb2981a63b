"""Planned maintenance and restarts on request end to end, with `tether up`, real agents and
task processes: advance notices reach the job's controller, a silent controller cannot hold up
the start of the window, and the machines come back after it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.e2e.test_taskcontrol import ControllerThread, ProtoOnlyController, running_job
from tests.support.harness import LocalRegion, get_json, tasks_of, wait_for
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb

WINDOW_S = 6


def machine_states(client: httpx.Client) -> dict[str, str]:
    return {m["id"]: m["state"] for m in get_json(client, "/v1/machines")["machines"]}


def by_index(client: httpx.Client, handle: str) -> dict[int, dict[str, Any]]:
    return {task["index"]: task for task in tasks_of(client, handle)}


def moved_off(
    client: httpx.Client, handle: str, machine: str, indexes: Iterable[int]
) -> dict[int, dict[str, Any]] | None:
    """The job's tasks by index once each of `indexes` runs on a machine other than `machine`."""
    now = by_index(client, handle)
    away = all(
        now[i]["machine"] not in (None, machine) and now[i]["state"] == "running" for i in indexes
    )
    return now if away else None


def test_maintenance_moves_tasks_at_its_start_whatever_a_silent_controller_says(
    region: LocalRegion,
) -> None:
    with region.client() as client:
        handle = "default/maintained"
        tasks = running_job(client, "maintained", 4)
        target = tasks[0]["machine"]
        on_target = {t["index"]: t["pid"] for t in tasks if t["machine"] == target}

        with ControllerThread(region, handle, ProtoOnlyController(hang=True)) as controller:
            start = datetime.now(UTC) + timedelta(seconds=10)
            created = client.post(
                "/v1/maintenance",
                json={
                    "machines": [target],
                    "start": start.isoformat(),
                    "duration_s": WINDOW_S,
                    "kind": "reboot",
                    "reason": "kernel upgrade",
                },
            )
            assert created.status_code == 201, created.text

            def noticed() -> pb.TaskControlRequest | None:
                return next((call for call in controller.calls if call.advance_notices), None)

            call = wait_for(noticed, timeout_s=20, what="an advance notice")
            assert datetime.now(UTC) < start, "the notice came too late to test it"
            [notice] = call.advance_notices
            assert list(notice.machine_ids) == [target]
            assert {task.index for task in notice.affected_tasks} == set(on_target)
            assert notice.reason == "kernel upgrade"
            moves = [op for op in call.pending_operations if op.kind == pb.OPERATION_KIND_MOVE]
            assert {op.tasks[0].index for op in moves} == set(on_target)
            for move in moves:
                assert abs(move.deadline.ToDatetime(UTC) - start) < timedelta(seconds=1)
            # Drained from now on, and nothing moves before the start: nobody approved.
            wait_for(
                lambda: machine_states(client)[target] == "draining",
                timeout_s=10,
                what=f"{target} draining",
            )
            now = by_index(client, handle)
            assert datetime.now(UTC) < start
            assert {i: now[i]["pid"] for i in on_target} == on_target
            moved = wait_for(
                lambda: moved_off(client, handle, target, on_target),
                timeout_s=40,
                what=f"tasks moved off {target}",
            )
            assert datetime.now(UTC) >= start
            for index, pid in on_target.items():
                assert moved[index]["pid"] != pid
            # The others never stopped.
            for task in tasks:
                if task["index"] not in on_target:
                    assert moved[task["index"]]["pid"] == task["pid"]

            # The silent controller shows in `tether job show`.
            shown = region.cli("job", "show", handle)
            assert shown.returncode == 0, shown.stderr
            assert "FAILING" in shown.stdout
            assert re.search(r"DEADLINE_EXCEEDED", shown.stdout)

        wait_for(
            lambda: (
                machine_states(client)[target] == "up"
                and not get_json(client, "/v1/maintenance")["maintenance"]
            ),
            timeout_s=WINDOW_S + 20,
            what=f"{target} back up after the window",
        )


def test_a_restart_on_request_restarts_only_the_tasks_asked_for(region: LocalRegion) -> None:
    with region.client() as client:
        handle = "default/restarted"
        before = {t["index"]: t for t in running_job(client, "restarted", 3)}
        asked = region.cli("job", "restart", handle, "--task", "1", "--reason", "reload")
        assert asked.returncode == 0, asked.stderr
        assert "1 restart operation(s) for tasks 1" in asked.stdout

        def restarted() -> dict[int, dict[str, Any]] | None:
            now = by_index(client, handle)
            task = now[1]
            fresh = task["state"] == "running" and task["pid"] not in (None, before[1]["pid"])
            return now if fresh else None

        now = wait_for(restarted, timeout_s=30, what="task 1 restarted")
        assert (now[1]["machine"], now[1]["restarts"]) == (before[1]["machine"], 0)
        assert now[1]["attempt"] > before[1]["attempt"]
        for index in (0, 2):
            assert now[index]["pid"] == before[index]["pid"]


def test_the_cli_schedules_maintenance_of_an_msb_and_cancels_it(region: LocalRegion) -> None:
    with region.client() as client:
        machines = get_json(client, "/v1/machines")["machines"]
        topology = machines[0]["topology"]
        msb = f"{topology['dc']}/{topology['msb']}"
        in_msb = {
            m["id"]
            for m in machines
            if (m["topology"]["dc"], m["topology"]["msb"]) == (topology["dc"], topology["msb"])
        }
        scheduled = region.cli(
            *("maintenance", "schedule", "--msb", msb, "--in", "1h", "--duration", "30m"),
            *("--kind", "power", "--reason", "breaker test"),
        )
        assert scheduled.returncode == 0, scheduled.stderr
        match = re.search(r"maintenance ([0-9a-f-]{36}): (\d+) machine", scheduled.stdout)
        assert match is not None, scheduled.stdout
        assert int(match.group(2)) == len(in_msb)
        wait_for(
            lambda: all(machine_states(client)[m] == "draining" for m in in_msb),
            timeout_s=10,
            what=f"{msb} draining",
        )
        listed = region.cli("maintenance", "ls")
        assert match.group(1) in listed.stdout
        assert "scheduled" in listed.stdout

        cancelled = region.cli("maintenance", "cancel", match.group(1))
        assert cancelled.returncode == 0, cancelled.stderr
        wait_for(
            lambda: all(machine_states(client)[m] == "up" for m in in_msb),
            timeout_s=10,
            what=f"{msb} up again",
        )
        unknown = region.cli("maintenance", "cancel", match.group(1))
        assert unknown.returncode == 1
        assert "does not exist" in unknown.stderr
        assert "Traceback" not in unknown.stderr


def test_a_drain_with_deadline_0_moves_the_tasks_at_once_and_undrain_returns_the_machine(
    region: LocalRegion,
) -> None:
    with region.client() as client:
        handle = "default/drained"
        tasks = running_job(client, "drained", 3)
        target = tasks[0]["machine"]
        on_target = {t["index"]: t["pid"] for t in tasks if t["machine"] == target}

        drained = region.cli("machine", "drain", target, "--deadline", "0", "--reason", "disk")
        assert drained.returncode == 0, drained.stderr
        assert f"machine {target}: draining (now)" in drained.stdout
        wait_for(
            lambda: machine_states(client)[target] == "draining",
            timeout_s=10,
            what=f"{target} draining",
        )
        moved = wait_for(
            lambda: moved_off(client, handle, target, on_target),
            timeout_s=20,
            what=f"tasks moved off {target}",
        )
        for index, pid in on_target.items():
            assert moved[index]["pid"] != pid
        # Still draining after the moves: nothing comes back to it.
        assert machine_states(client)[target] == "draining"

        undrained = region.cli("machine", "undrain", target)
        assert undrained.returncode == 0, undrained.stderr
        assert f"cancelled drain drain-{target}" in undrained.stdout
        wait_for(
            lambda: machine_states(client)[target] == "up",
            timeout_s=10,
            what=f"{target} up again",
        )
        assert client.delete(f"/v1/jobs/{handle}").status_code == 202
