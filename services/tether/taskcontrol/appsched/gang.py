"""`gang`: a training job's tasks are disrupted all together, or not at all."""

from __future__ import annotations

from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.taskcontrol.appsched.base import (
    Decision,
    ReferenceController,
    Situation,
    task_indexes,
)


def plan_gang(situation: Situation) -> Decision:
    """Acknowledges every pending operation once together they cover every task of the job
    (indexes 0 to task_count - 1) and no acknowledgement is in flight; otherwise none.

    A gang makes progress only when all its members run, so restarting them one at a time costs
    a stall per member; restarting them together costs one. An operation with a deadline (planned
    maintenance) is executed at its deadline whatever this answers: acknowledging nothing cannot
    hold off maintenance, only miss the chance to take the whole gang down at once.

    STOP operations (a shrink of the job) are acknowledged at once: their tasks are leaving the
    gang, and holding them would hold up the shrink for good.
    """
    leaving = [op.id for op in situation.pending if op.kind == pb.OPERATION_KIND_STOP]
    staying = [op for op in situation.pending if op.kind != pb.OPERATION_KIND_STOP]
    if situation.in_flight:
        return Decision(
            leaving,
            f"{len(situation.in_flight)} task(s) of an earlier acknowledgement are still being "
            "disrupted",
        )
    covered = frozenset[int]().union(*(task_indexes(op) for op in staying))
    missing = sorted(set(range(situation.task_count)) - covered)
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        return Decision(
            leaving,
            f"pending operations cover {situation.task_count - len(missing)} of "
            f"{situation.task_count} tasks (none yet for task {shown})",
        )
    return Decision([*leaving, *(op.id for op in staying)])


class GangController(ReferenceController):
    """Serves `plan_gang`."""

    async def plan(self, situation: Situation) -> Decision:
        return plan_gang(situation)
