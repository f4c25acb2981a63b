"""Queue views: each entitlement's use of its tree's quota, and its queue in order."""

from __future__ import annotations

from tether.frontend.schemas import View
from tether.model import Resources, Timestamp
from tether.model.admission import EntitlementUse


class QueueList(View):
    queues: list[EntitlementUse]
    """Every entitlement the principal may see whose tree's decider has reported, by name."""


class QueuedJobView(View):
    """A job waiting in its entitlement's queue, to start or for the tasks it gained."""

    position: int
    """1 for the next job its entitlement admits."""
    job: str
    priority: int
    start_deadline: Timestamp | None
    """`deadline - expected_duration_s`, the queue's second key; None: no deadline."""
    queued_at: Timestamp
    waiting_s: float
    """How long it has waited so far (since it first joined the queue)."""
    tasks: int
    least_tasks: int
    """The fewest tasks it is admitted with (its `min_count`, else all)."""
    admitted: int = 0
    """Tasks admitted already: a job admitted with fewer than its count waits for the rest
    (an elastic job growing, a job scaled up)."""
    requested: Resources
    """Its task resources times its task count."""
    reason: str
    """Why it waits (for the head: which dimension is short and by how much, and whether
    preempting would help)."""


class QueueView(View):
    """One entitlement's queue, in order, and its use of its tree's quota."""

    entitlement: str
    use: EntitlementUse | None
    """What it reserves, borrows and lends, as its tree's decider last reported (None: no
    report yet)."""
    reported_at: Timestamp | None
    total: int
    """Jobs waiting in the queue."""
    offset: int
    """Jobs before the first one of `jobs`."""
    jobs: list[QueuedJobView]
    """A page of the queue, in order, from position `offset + 1`."""
