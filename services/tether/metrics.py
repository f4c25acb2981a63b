"""Every Prometheus metric of Tether's services (served by `metrics_server`)."""

from __future__ import annotations

from typing import Final

import grpc
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

# Every metric registers with prometheus_client's default registry, which also carries the
# process_* and python_* collectors; the registry is per process, so one server per process.

# Store requests take from well under a millisecond (SQLite reads) to the request deadline.
_STORE_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

STORE_REQUEST_SECONDS: Final = Histogram(
    "tether_store_request_duration_seconds",
    "Duration of store requests, failed ones included.",
    ["backend", "operation"],
    buckets=_STORE_BUCKETS,
)
STORE_REQUEST_ERRORS: Final = Counter(
    "tether_store_request_errors_total",
    "Store requests that raised (StoreUnavailable, CompactedError, LeaseNotFound, ...).",
    ["backend", "operation"],
)

FRONTEND_REQUESTS: Final = Counter(
    "tether_frontend_requests_total",
    "REST requests answered, by method, route template and status code.",
    ["method", "route", "status"],
)
FRONTEND_REQUEST_SECONDS: Final = Histogram(
    "tether_frontend_request_duration_seconds",
    "Duration of REST requests, by method and route template.",
    ["method", "route"],
)
FRONTEND_FAST_READS: Final = Counter(
    "tether_frontend_fast_reads_total",
    "GET requests answered the short way (frontend/fastreads.py), by route template.",
    ["route"],
)

ALLOCATOR_PLACEMENTS: Final = Counter(
    "tether_allocator_placements_total",
    "Tasks a Place request placed (committed on a machine) or left unplaced.",
    ["outcome"],
)
ALLOCATOR_CONFLICTS: Final = Counter(
    "tether_allocator_commit_conflicts_total",
    "Commits another writer's change made fail (optimistic concurrency); each is retried.",
    ["operation"],
)

SCHEDULER_RECONCILE_SECONDS: Final = Histogram(
    "tether_scheduler_reconcile_duration_seconds",
    "Duration of one reconcile of one job by a shard leader, failed ones included.",
)
SCHEDULER_TASKCONTROL_CALLS: Final = Counter(
    "tether_scheduler_taskcontrol_calls_total",
    "TaskController.Process calls to application-level schedulers, by outcome.",
    ["outcome"],
)
SCHEDULER_LEADER_TERMS: Final = Counter(
    "tether_scheduler_leader_terms_total",
    "Terms as a shard's leader this replica started and lost; started - lost is 1 while it leads.",
    ["event"],
)

ADMISSION_PASS_SECONDS: Final = Histogram(
    "tether_scheduler_admission_pass_seconds",
    "One pass of a tree decider over its queues: admissions, requeues, preemption choices.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
ADMISSION_WRITES: Final = Counter(
    "tether_scheduler_admission_writes",
    "Admission records a decider wrote, by outcome (a conflict: another decider was first).",
    ["outcome"],
)
ADMISSIONS: Final = Counter(
    "tether_scheduler_admissions",
    "Jobs admitted from their queue (start), or admitted more tasks (grow).",
    ["kind"],
)
QUEUE_WAIT_SECONDS: Final = Histogram(
    "tether_scheduler_queue_wait_seconds",
    "How long a job waited in its queue before it was admitted.",
    buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
)
PREEMPTIONS: Final = Counter(
    "tether_scheduler_preempted_tasks",
    "Tasks preempted, by reason: priority (in the preemptor's own entitlement), reclaim "
    "(quota the preemptor's subtree had lent) or fair-share (borrowed beyond the weighted "
    "fair share while a borrower below it waits).",
    ["reason"],
)
TASK_MOVES: Final = Counter(
    "tether_scheduler_task_moves",
    "Tasks a leader moved off their machine, by the kind of notice that asked (reboot, "
    "hardware, network, power, drain, decommission, eviction, harvest-shrink; other: a notice "
    "withdrawn meanwhile).",
    ["notice"],
)
PREEMPTIONS_REFUSED: Final = Counter(
    "tether_scheduler_preemptions_refused",
    "Preemptions a decider proposed and did not carry out, by the rule in the way: placement "
    "(the head's tasks would fit no machine even with every candidate stopped), rate-limit, cost "
    "(a fair-share preemption would stop more than it starts) or fair-share (the victims would "
    "take their side below it).",
    ["rule"],
)
QUEUED_JOBS: Final = Gauge(
    "tether_scheduler_queued_jobs",
    "Jobs waiting in an entitlement's queue, on the leader that decides for its tree.",
    ["entitlement"],
)
QUOTA_BORROWED: Final = Gauge(
    "tether_scheduler_quota_borrowed",
    "What an entitlement's subtree uses beyond its quota, per resource dimension.",
    ["entitlement", "dimension"],
)
QUOTA_LENT: Final = Gauge(
    "tether_scheduler_quota_lent",
    "The part of an entitlement's idle quota that its siblings' borrowing uses.",
    ["entitlement", "dimension"],
)

AGENT_TASKS_STARTED: Final = Counter(
    "tether_agent_tasks_started_total", "Task attempts whose process the agent started."
)
AGENT_TASKS_EXITED: Final = Counter(
    "tether_agent_tasks_exited_total",
    "Task attempts whose end the agent reported, by final state.",
    ["state"],
)

HEALTH_MACHINES_MARKED: Final = Counter(
    "tether_health_machines_marked_total",
    "Machines the health checker set down (heartbeat missing) or up (heartbeat back).",
    ["state"],
)

BROKER_STATE_CHANGES: Final = Counter(
    "tether_broker_machine_state_changes_total",
    "Machine state changes the broker wrote for maintenance, by new state.",
    ["state"],
)
BROKER_HARVEST_CHANGES: Final = Counter(
    "tether_broker_harvest_changes_total",
    "Reports of harvest machines that changed their usable share, by change (shrink, grow).",
    ["change"],
)
BROKER_HARVEST_NOTICES: Final = Counter(
    "tether_broker_harvest_notices_total",
    "Notices the broker wrote from harvest machines' reports, by kind: eviction (the host takes "
    "the machine back) or harvest-shrink (its usable share no longer holds its tasks).",
    ["kind"],
)
BROKER_HARVEST_DISPLACED: Final = Counter(
    "tether_broker_harvest_displaced_tasks_total",
    "Tasks harvest-shrink notices named to move off their machine, the lowest priority first.",
)
BROKER_HARVEST_LOST: Final = Counter(
    "tether_broker_harvest_lost_tasks_total",
    "Tasks still on a harvest machine when its eviction was due: the host took them down.",
)
REBALANCER_ROUNDS: Final = Counter(
    "tether_rebalancer_rounds_total",
    "Rounds the rebalancer's leader made, by outcome: done, or failed (no allocator answered, "
    "the store failed).",
    ["outcome"],
)
REBALANCER_MOVES: Final = Counter(
    "tether_rebalancer_moves_total",
    "Moves the rebalancer proposed as MOVE operations, by strategy (dry runs propose none).",
    ["strategy"],
)
REBALANCER_WITHDRAWN: Final = Counter(
    "tether_rebalancer_moves_withdrawn_total",
    "Moves of the rebalancer withdrawn after waiting for approval longer than its move timeout.",
)
REBALANCER_DEFERRED: Final = Counter(
    "tether_rebalancer_deferred_total",
    "Groups of tasks a round did not move, by reason (no-better-machine, no-gain, "
    "worsens-<strategy>, does-not-fit, limit-per-job, limit-per-minute, moved-this-round).",
    ["reason"],
)
REBALANCER_MEASURE: Final = Gauge(
    "tether_rebalancer_measure",
    "Each strategy's measure of the region as the last round read it (lower is better).",
    ["strategy"],
)
REBALANCER_GAIN: Final = Gauge(
    "tether_rebalancer_expected_gain",
    "How much the last round's moves are expected to lower each strategy's measure.",
    ["strategy"],
)
BROKER_MACHINES_RECORDED: Final = Counter(
    "tether_broker_machines_recorded_total",
    "Machine records the broker created (new) or updated (inventory) from heartbeats.",
    ["change"],
)


def call_outcome(error: BaseException) -> str:
    """The outcome label of a failed call: "timeout" past its gRPC deadline, else "failed"."""
    cause = error if isinstance(error, grpc.aio.AioRpcError) else error.__cause__
    if (
        isinstance(cause, grpc.aio.AioRpcError)
        and cause.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    ):
        return "timeout"
    return "failed"


def exposition(accept: str) -> tuple[bytes, str]:
    """The process's metrics in the format `accept` asks for (Prometheus text by default), and
    its content type."""
    encode, content_type = choose_encoder(accept)
    return encode(REGISTRY), content_type
