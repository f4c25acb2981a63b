"""The scheduling library on a whole region (`tether up`, four machines, real task processes):
a gang of 8 starts all or nothing, co-located pairs share a machine, anti-affinity never puts
two tasks on one machine, another team's label is invisible and unusable, and a label owned by
a job goes with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.harness import LocalRegion, wait_for
from tether import esl
from tether.sdk import TaskView, TetherAPIError, TetherClient

PER_TASK = {"cpu": 100, "memory_mib": 64}
TEAMS = ("team-a", "team-b")


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    running = LocalRegion(tmp_path_factory.mktemp("esl") / "tether", agents=4)
    try:
        running.start()
        with TetherClient(running.url, running.token) as admin:
            for team in TEAMS:
                admin.create_entitlement(
                    {
                        "name": team,
                        "quota": {"resources": {"cpu": 16000, "memory_mib": 16384}},
                        "members": ["admin", f"{team}-lead"],
                    }
                )
        yield running
    finally:
        running.cleanup()


@pytest.fixture
def client(region: LocalRegion) -> Iterator[TetherClient]:
    with TetherClient(region.url, region.token) as admin:
        yield admin


def spec(name: str, team: str, count: int, extra: dict[str, int], **task: Any) -> dict[str, Any]:
    return {
        "name": name,
        "entitlement": team,
        "count": count,
        "task": {
            "package": "sleeper",
            "version": "1",
            "command": "/bin/sh",
            "args": ["-c", "exec sleep 600"],
            "resources": {**PER_TASK, "extra": extra},
            **task,
        },
    }


def running_tasks(client: TetherClient, handle: str, count: int) -> list[TaskView] | None:
    tasks = client.list_tasks(handle)
    running = [task for task in tasks if task.state == "running"]
    return running if len(running) == count else None


def wait_running(client: TetherClient, handle: str, count: int) -> list[TaskView]:
    found = wait_for(
        lambda: running_tasks(client, handle, count),
        timeout_s=90,
        what=f"{count} tasks of {handle} running",
    )
    assert found is not None
    return found


def wait_unplaced(client: TetherClient, handle: str, why: str) -> list[TaskView]:
    """Waits until the scheduler tried to place the job's pending tasks and recorded the
    allocator's reason, which says `why`: the moment they could have started has passed.
    Returns the job's tasks as they are then."""

    def tried() -> list[TaskView] | None:
        tasks = client.list_tasks(handle)
        pending = [t for t in tasks if t.state == "pending"]
        return tasks if pending and all(why in t.message for t in pending) else None

    found = wait_for(tried, timeout_s=60, what=f"{handle}'s pending tasks: {why}")
    assert found is not None
    return found


def test_a_gang_of_8_starts_all_or_nothing(client: TetherClient) -> None:
    # Each machine holds 40 such tasks: no room for 200, so nothing is set and none starts.
    too_big = esl.gang(client, "team-a", "big-gang", 200, PER_TASK)
    assert too_big is None
    assert client.get_cluster_state("team-a", label="big-gang") == []
    waiting = client.submit_job(spec("big", "team-a", 8, {"big-gang": 1})).handle
    tasks = wait_unplaced(client, waiting, "insufficient ephemeral resource big-gang")
    assert [task.state for task in tasks] == ["pending"] * 8

    extra = esl.gang(client, "team-a", "gang-8", 8, PER_TASK)
    assert extra == {"gang-8": 1}
    handle = client.submit_job(spec("gang", "team-a", 8, extra)).handle
    started = wait_running(client, handle, 8)
    (state,) = client.get_cluster_state("team-a", label="gang-8")
    assert sum(share.capacity for share in state.machines) == 8
    assert sum(share.held for share in state.machines) == 8
    assert {task.machine for task in started} == {share.machine for share in state.machines}
    client.delete_job(handle)
    client.delete_job(waiting)


def test_colocated_pairs_share_a_machine(client: TetherClient) -> None:
    handles = []
    for pair in ("pair-1", "pair-2"):
        extra = esl.colocate(client, "team-a", pair, 2, PER_TASK)
        assert extra is not None
        handles.append(client.submit_job(spec(pair, "team-a", 2, extra)).handle)
    for handle in handles:
        assert len({task.machine for task in wait_running(client, handle, 2)}) == 1
        client.delete_job(handle)


def test_anti_affinity_never_doubles_up(client: TetherClient) -> None:
    extra = esl.anti_affinity(client, "team-a", "apart")
    handle = client.submit_job(spec("apart", "team-a", 6, extra)).handle
    started = wait_running(client, handle, 4)
    assert len({task.machine for task in started}) == 4
    # Four machines, one slot each: the other two wait, and the allocator says why.
    tasks = wait_unplaced(client, handle, "insufficient ephemeral resource apart")
    assert sorted(task.state for task in tasks) == ["pending"] * 2 + ["running"] * 4
    client.delete_job(handle)


def test_another_teams_label_is_invisible_and_unusable(
    region: LocalRegion, client: TetherClient
) -> None:
    token = client.create_principal("team-b-lead", []).token
    with TetherClient(region.url, token) as team_b:
        team_b.set_resource("team-b", "theirs", 10, None)
        assert [s.resource.label for s in team_b.get_cluster_state()] == ["theirs"]
        with pytest.raises(TetherAPIError) as refused:
            team_b.set_resource("team-a", "theirs", 10, None)
        assert refused.value.status == 403
        assert all(s.resource.entitlement == "team-b" for s in team_b.get_cluster_state())
    assert client.get_cluster_state("team-a", label="theirs") == []
    # team-a's tasks asking for it find none.
    handle = client.submit_job(spec("borrower", "team-a", 1, {"theirs": 1})).handle
    wait_unplaced(client, handle, "insufficient ephemeral resource theirs")
    client.delete_job(handle)


def test_a_label_owned_by_a_job_goes_with_it(client: TetherClient) -> None:
    handle = client.submit_job(spec("owner", "team-a", 2, {"mine": 1})).handle
    client.set_resource("team-a", "mine", 2, None, owner_job="owner")
    wait_running(client, handle, 2)
    client.delete_job(handle)
    wait_for(
        lambda: client.get_cluster_state("team-a", label="mine") == [],
        timeout_s=60,
        what="the label deleted with its job",
    )
