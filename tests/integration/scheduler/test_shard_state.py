"""What a shard's leader follows of the tasks: its own entitlements' and those of the trees
rooted on its shard, and no other shard's; an entitlement that moves in or out is followed or
dropped, and its jobs are planned whole once their tasks are loaded."""

from __future__ import annotations

import operator
from datetime import UTC, datetime
from functools import partial

from tests.integration.admission.test_racing_deciders import org_of_two_teams
from tests.integration.scheduler.helpers import make_job, put, submit
from tests.support.waiting import eventually
from tether.model import Entitlement, Task, TaskState, TaskStatus, to_json
from tether.scheduler.state import ShardState
from tether.store import Store, keys

MINE, OTHER = "shard-0", "shard-1"


def task(handle: str, index: int) -> Task:
    return Task(
        job=handle,
        index=index,
        generation=1,
        version="1.0",
        state=TaskState.PENDING,
        updated_at=datetime.now(UTC),
    )


async def place(store: Store, entitlement: str, shard: str) -> None:
    await store.put(keys.shard_assignment(entitlement), shard.encode())


async def add_job_with_a_task(store: Store, entitlement: str) -> str:
    await submit(store, make_job(entitlement, "web", 1))
    handle = f"{entitlement}/web"
    await store.put(keys.task(entitlement, "web", 0), to_json(task(handle, 0)))
    return handle


async def test_a_leader_follows_the_tasks_of_its_shard_and_of_its_trees_only(
    store: Store,
) -> None:
    org, red, blue = org_of_two_teams(5)
    lone = Entitlement(name="lone", quota=org.quota)
    for entitlement in (org, red, blue, lone):
        await put(store, keys.entitlement(entitlement.name), entitlement)
    # The tree is rooted here, though an admin moved "blue" to the other shard: its admissions
    # are still decided here, from its tasks.
    for name, shard in (("org", MINE), ("red", MINE), ("blue", OTHER), ("lone", OTHER)):
        await place(store, name, shard)
    handles = {name: await add_job_with_a_task(store, name) for name in ("red", "blue", "lone")}
    # (job, task or None for the whole job, whether a reconcile would see the job then)
    marks: list[tuple[str, int | None, bool]] = []

    def mark(handle: str, index: int | None) -> None:
        marks.append((handle, index, state.view(handle) is not None))

    state = ShardState(store, MINE, mark, fencing_s=10)
    await state.start()
    try:
        assert set(state.tasks_of(handles["red"])) == {0}
        assert set(state.tasks_of(handles["blue"])) == {0}
        assert state.tasks_of(handles["lone"]) == {}
        assert state.view(handles["lone"]) is None
        # Tasks without their statuses are no view to plan from.
        assert state.view(handles["red"]) is not None
        await state.statuses.follow({"org", "blue"})
        assert state.view(handles["red"]) is None
        await state.statuses.follow({"org", "red", "blue"})
        assert state.view(handles["red"]) is not None

        # "lone" moves here: its tasks load, and then its job is planned whole.
        marks.clear()
        await place(store, "lone", MINE)
        await eventually(
            lambda: (handles["lone"], None, True) in marks,
            what="the moved entitlement's job marked once its tasks are followed",
        )
        view = state.view(handles["lone"])
        assert view is not None
        assert set(view.tasks) == {0}

        # It moves away again: its tasks are dropped, and a write to them is not followed.
        await place(store, "lone", OTHER)
        await eventually(
            lambda: state.tasks_of(handles["lone"]) == {}, what="the tasks of the entitlement gone"
        )
        marks.clear()
        await store.put(keys.task("lone", "web", 1), to_json(task(handles["lone"], 1)))
        # Proof that the write above had its chance to be seen: a later write of ours is.
        await store.put(keys.task("red", "web", 1), to_json(task(handles["red"], 1)))
        await eventually(lambda: (handles["red"], 1, True) in marks, what="our own task followed")
        assert [mark for mark in marks if mark[0] == handles["lone"]] == []
        assert state.tasks_of(handles["lone"]) == {}
    finally:
        await state.stop()


async def test_only_changes_that_move_a_jobs_holding_reach_the_decider(store: Store) -> None:
    await put(store, keys.entitlement("red"), Entitlement(name="red"))
    await place(store, "red", MINE)
    handle = await add_job_with_a_task(store, "red")
    marks: list[tuple[str, int | None]] = []
    holding: list[str] = []
    state = ShardState(
        store,
        MINE,
        lambda handle, index: marks.append((handle, index)),
        fencing_s=10,
        holding_changed=holding.append,
    )
    await state.start()
    try:
        placed = task(handle, 0).model_copy(update={"machine": "m1", "state": TaskState.PLACED})
        status = TaskStatus(
            job=handle,
            index=0,
            machine="m1",
            attempt=0,
            state=TaskState.RUNNING,
            updated_at=datetime.now(UTC),
        )
        steps: list[tuple[str, bytes, bool]] = [
            (keys.task("red", "web", 0), to_json(placed), True),  # on a machine now
            (keys.task_status("red", "web", 0), to_json(status), False),
            (
                keys.task("red", "web", 0),
                to_json(placed.model_copy(update={"message": "x"})),
                False,
            ),
            (keys.task("red", "web", 1), to_json(task(handle, 1)), True),  # a new task
        ]
        for key, value, moves_holding in steps:
            holding.clear()
            marks.clear()
            await store.put(key, value)
            # The reconcile's mark proves the change was seen.
            await eventually(
                partial(operator.contains, marks, (handle, keys.task_of_key(key)[2])),
                what=f"the change of {key} seen",
            )
            assert holding == ([handle] if moves_holding else []), key
    finally:
        await state.stop()
