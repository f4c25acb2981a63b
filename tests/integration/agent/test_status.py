"""The agent's status writes against a real store: a pass's reports in one transaction, and each
report still judged on its own when the store disagrees with what the agent believed."""

from __future__ import annotations

from pathlib import Path

from tests.integration.agent.helpers import ENT, JOB, read_status, task_put
from tests.integration.agent.helpers import machine as machine
from tether.agent.status import Attempt, StatusReport, StatusWriter
from tether.agent.workdir import TaskRef, WorkDir
from tether.model import Machine, TaskState
from tether.store import Delete, Store, keys


def attempt(tmp_path: Path, index: int, number: int) -> Attempt:
    return Attempt(WorkDir(tmp_path).attempt(TaskRef(ENT, JOB, index), number), seen_at=0.0)


async def test_a_passs_reports_go_in_one_transaction(
    store: Store, machine: Machine, tmp_path: Path
) -> None:
    await store.txn([], [task_put(machine, index, 1) for index in range(3)])
    writer = StatusWriter(store, machine.id)
    before = (await store.range(keys.TASK_STATUS)).revision
    reports = [
        StatusReport(attempt(tmp_path, index, 1), TaskState.STARTING, True) for index in range(3)
    ]

    assert await writer.write_all(reports) == [True, True, True]

    listing = await store.range(keys.TASK_STATUS)
    assert listing.revision == before + 1
    assert {kv.mod_revision for kv in listing.kvs} == {before + 1}
    # Reported already: nothing is written again.
    assert await writer.write_all(reports) == [True, True, True]
    assert (await store.range(keys.TASK_STATUS)).revision == before + 1


async def test_a_key_that_moved_on_fails_its_report_alone(
    store: Store, machine: Machine, tmp_path: Path
) -> None:
    await store.txn([], [task_put(machine, index, 1) for index in range(3)])
    # Another machine already runs a newer attempt of task 1; task 2 is gone.
    elsewhere = StatusWriter(store, "elsewhere")
    assert await elsewhere.write_all(
        [StatusReport(attempt(tmp_path, 1, 2), TaskState.STARTING, True)]
    ) == [True]
    await store.txn([], [Delete(keys.task(ENT, JOB, 2))])
    writer = StatusWriter(store, machine.id)

    written = await writer.write_all(
        [StatusReport(attempt(tmp_path, index, 1), TaskState.STARTING, True) for index in range(3)]
    )

    assert written == [True, False, False]
    first, second, third = [await read_status(store, index) for index in range(3)]
    assert first is not None
    assert (first.machine, first.attempt) == (machine.id, 1)
    assert second is not None
    assert (second.machine, second.attempt) == ("elsewhere", 2)
    assert third is None


async def test_reports_of_one_key_are_written_in_their_order(
    store: Store, machine: Machine, tmp_path: Path
) -> None:
    await store.txn([], [task_put(machine, 0, 2)])
    writer = StatusWriter(store, machine.id)
    old = attempt(tmp_path, 0, 1)
    assert await writer.write_all([StatusReport(old, TaskState.RUNNING, True)]) == [True]

    # The old attempt's end may only be written while the key still describes it: written
    # after the new attempt's claim, it would fail.
    written = await writer.write_all(
        [
            StatusReport(old, TaskState.KILLED, False, {"message": "stopped"}),
            StatusReport(attempt(tmp_path, 0, 2), TaskState.STARTING, True),
        ]
    )

    assert written == [True, True]
    status = await read_status(store, 0)
    assert status is not None
    assert (status.attempt, status.state) == (2, TaskState.STARTING)
