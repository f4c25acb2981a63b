"""What the REST API returns, as typed read-only views that ignore fields they do not know."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

RUNNING = "running"
"""The task state a started process reports; `tether job submit --wait` waits for it."""


class View(BaseModel):
    """A response object: unknown fields are ignored so newer frontends stay readable. Each
    view has the fields, types and required fields of the frontend's schema of its answer
    (tests/unit/sdk/test_contract.py checks them)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class ResourcesView(View):
    """An amount of resources: cpu in millicores, memory in MiB, disk in GiB."""

    cpu: int = 0
    memory_mib: int = 0
    disk_gib: int = 0
    gpus: int = 0
    extra: dict[str, int] = Field(default_factory=dict)


class JobView(View):
    """A job: its spec, generation, and how many of its tasks are in each state."""

    handle: str
    entitlement: str
    name: str
    count: int
    generation: int
    deleting: bool
    created_at: datetime
    updated_at: datetime
    spec: dict[str, Any]
    """The JobSpec as submitted (kept as JSON: the SDK does not copy the model)."""
    tasks: dict[str, int]
    """Task count by effective state."""
    running: int
    operations: dict[str, int] | None = None
    """Open task operations by state (only when showing one job)."""
    control: ControlView | None = None
    """How asking the job's TaskController goes (only when showing one job)."""
    admission: AdmissionView | None = None
    """Its place in its entitlement's queue and what it is admitted."""
    queue_position: int | None = None
    """1 for the next job its entitlement admits (only when showing one job)."""
    progress: float | None = None
    """The fewest steps any of its tasks reported, kept across preemption and suspension
    (only when showing one job; None until every task reported)."""


class AdmissionEventView(View):
    """One change of a job's admission: queued, admitted, resized, preempted, requeued."""

    at: datetime
    kind: str
    detail: str = ""
    tasks: int = 0
    by: str | None = None
    """The preemptor, for `preempted` and `requeued`."""
    cause: str | None = None
    """Why, for `preempted`: priority, reclaim or fair-share."""


class AdmissionView(View):
    """A job's admission: queued, admitted or preempting, and its history."""

    job: str
    state: str = "queued"
    priority: int
    start_deadline: datetime | None = None
    queued_at: datetime
    task_resources: ResourcesView
    tasks: int
    least_tasks: int
    admitted: int = 0
    admitted_at: datetime | None = None
    reason: str = ""
    preempted_by: str | None = None
    preemptions: int = 0
    preempted_at: list[datetime] = Field(default_factory=list)
    history: list[AdmissionEventView] = Field(default_factory=list)
    updated_at: datetime


class ControlView(View):
    """The last call to a job's TaskController."""

    sequence: int = 0
    controller: str = ""
    error: str = ""
    failures: int = 0
    updated_at: datetime | None = None


class OperationView(View):
    """A task operation: what it does to which tasks, why, and how far it got."""

    id: str
    kind: str
    job: str
    tasks: list[int]
    reason: str
    state: str = "pending-approval"
    created_at: datetime
    updated_at: datetime
    deadline: datetime | None = None
    target_version: str | None = None
    """The version an update installs."""
    target_machine: str | None = None
    """Where a move goes; None: the allocator chooses."""
    attempt: int | None = None
    """The attempt of its task the operation acts on; None: any attempt."""
    notice: str | None = None
    """The maintenance whose advance notice the operation answers."""


class MaintenanceView(View):
    """Planned maintenance of machines."""

    id: str
    machines: list[str]
    start: datetime
    end: datetime
    duration_s: int
    kind: str
    reason: str
    phase: str
    tasks: list[str]
    """Only these tasks move (a harvest machine's shrink); empty: every task on the machines."""


class MachineDrainView(View):
    """The notice draining (or decommissioning) a machine; `created` is False when it was
    already draining under it and nothing changed."""

    machine: str
    created: bool
    notice: MaintenanceView


class MachineUndrainView(View):
    """The drain and decommission notices an undrain cancelled (none: there were none)."""

    machine: str
    cancelled: list[MaintenanceView]


class TaskView(View):
    """One task with its effective state."""

    task_id: str
    index: int
    state: str
    desired: str
    machine: str | None
    attempt: int
    restarts: int
    generation: int
    version: str
    pid: int | None
    exit_code: int | None
    message: str
    started_at: datetime | None
    updated_at: datetime
    progress: float | None = None
    """Steps the task last reported (`TETHER_PROGRESS_FILE`); None: none."""


class TopologyView(View):
    """Where a machine sits."""

    region: str
    dc: str
    msb: str
    rack: str


class MachineView(View):
    """A machine with its capacity, what its tasks hold, and whether its agent is alive."""

    id: str
    hostname: str
    topology: TopologyView
    hardware_type: str
    attributes: dict[str, str]
    """Its labels, which job constraints match (`gpu_type`, say)."""
    state: str
    entitlement: str | None
    """The entitlement that owns it; None: the free pool."""
    host_profile: str | None
    """The host profile its allocation record asks it to carry."""
    host_profile_current: str | None
    """The host profile its agent last finished switching to."""
    capacity: ResourcesView
    allocated: ResourcesView
    free: ResourcesView
    tasks: int
    heartbeat: bool


class ShardView(View):
    """A scheduler shard, its current leader (if any) and its entitlements."""

    shard: str
    leader: str | None
    leader_since: datetime | None
    entitlements: list[str]


class ReplicaView(View):
    """A scheduler replica standing by."""

    identity: str
    pid: int
    since: datetime


class ShardDetailView(ShardView):
    """A shard with its replicas, its leader's last report and what it holds (admin view)."""

    draining: bool
    leader_pid: int | None
    lease_expires_at: datetime | None
    standbys: list[ReplicaView]
    last_reconcile_at: datetime | None
    reconciles: int | None
    backlog: int | None
    reported_at: datetime | None
    jobs: int
    tasks: int
    machines: int
    operations: int
    warning: str | None = None
    """Why its entitlements' jobs are not scheduled (it has no leader); None when they are."""


class ShardMoveView(View):
    """An entitlement moved between shards."""

    entitlement: str
    from_shard: str
    to_shard: str
    revision: int


class ShardDrainView(View):
    """A drained shard and the moves that emptied it."""

    shard: str
    moves: list[ShardMoveView]


class ShardFailoverView(View):
    """A failover under way: the leader that was deposed and who may take over."""

    shard: str
    previous_leader: str
    standbys: list[ReplicaView]


class RebalanceMoveView(View):
    """A task a rebalancer run moves (or would, in a dry run), and the operation proposed."""

    job: str
    index: int
    source: str
    target: str
    strategy: str
    why: str
    operation: str | None = None


class RebalanceRunView(View):
    """A rebalancer run: pending, done (its moves, each strategy's measure before and after),
    or failed (`message`)."""

    id: str
    dry_run: bool
    strategies: list[str]
    requested_by: str
    state: str
    created_at: datetime
    updated_at: datetime
    moves: list[RebalanceMoveView]
    before: dict[str, float]
    after: dict[str, float]
    gains: dict[str, float]
    deferred: dict[str, int]
    message: str


class AllocatorView(View):
    """A live allocator replica."""

    id: str
    address: str
    pid: int
    since: datetime


class MachineCountsView(View):
    """How many machines the region has, in total and in each state."""

    total: int
    up: int
    draining: int
    maintenance: int
    down: int
    decommissioned: int


class RegionView(View):
    """The region at a glance."""

    name: str
    shards: list[ShardView]
    allocators: list[AllocatorView]
    machines: MachineCountsView
    jobs: int
    tasks: dict[str, int]
    """Task count by effective state."""


class PlacementRuleView(View):
    """One hard placement rule and how many machines it rejected that earlier rules let through."""

    rule: str
    machines_rejected: int
    detail: str


class PlacementPreferenceView(View):
    """One preference rule of the job, its weight, and how many fitting machines match it."""

    rule: str
    weight: int
    machines_matching: int


class ChosenMachineView(View):
    """A machine holding tasks of the job, and its rank for one more task (0: it takes none)."""

    machine: str
    tasks: list[int]
    rank: int
    preferences: list[str]


class PlacementView(View):
    """An allocator's explanation of a job's placement."""

    job: str
    summary: str
    machines_considered: int
    machines_fitting: int
    entitlement_machines: int
    rules: list[PlacementRuleView]
    """Hard rules in the order they were applied."""
    preferences: list[PlacementPreferenceView]
    chosen: list[ChosenMachineView]


class HostProfileView(View):
    """A host profile: the settings a machine switches to before it runs the tasks of an
    entitlement that names it, and how long the switch takes at least."""

    name: str
    description: str = ""
    settings: dict[str, str] = Field(default_factory=dict)
    switch_seconds: float = 0.0


class PrincipalToken(View):
    """A new principal and its token, which the API shows only once."""

    name: str
    roles: list[str]
    token: str


class EntitlementUseView(View):
    """What one entitlement reserves, borrows and lends, and its jobs waiting and admitted."""

    name: str
    parent: str | None = None
    weight: int
    quota: ResourcesView
    reserved: ResourcesView
    borrowed: ResourcesView
    lent: ResourcesView
    dominant_share: float
    queued: int
    admitted: int


class QueuedJobView(View):
    """A job waiting in its entitlement's queue, to start or for the tasks it gained."""

    position: int
    job: str
    priority: int
    start_deadline: datetime | None
    queued_at: datetime
    waiting_s: float
    tasks: int
    least_tasks: int
    admitted: int = 0
    """Tasks admitted already (a job scaled up, an elastic job growing)."""
    requested: ResourcesView
    reason: str


class QueueView(View):
    """One entitlement's queue in order, and its use (None before its decider reported)."""

    entitlement: str
    use: EntitlementUseView | None
    reported_at: datetime | None
    total: int
    """Jobs waiting in the queue."""
    offset: int
    jobs: list[QueuedJobView]
    """A page of the queue, in order, from position `offset + 1`."""


class NodeSpecView(View):
    """Which machines a grant covers: one by id, those meeting the constraints, or (neither)
    every machine the entitlement reaches."""

    machine: str | None = None
    constraints: list[dict[str, Any]] = Field(default_factory=list)


class ResourceGrantView(View):
    node_spec: NodeSpecView
    capacity: int


class EphemeralResourceView(View):
    """An entitlement's ephemeral resource: its label and grants, and what ends it."""

    entitlement: str
    label: str
    grants: list[ResourceGrantView]
    owner_job: str | None = None
    expires_at: datetime | None = None
    created_at: datetime
    updated_at: datetime


class MachineShareView(View):
    """A machine's capacity of a label, what the entitlement's tasks hold and what is free."""

    machine: str
    capacity: int
    held: int
    free: int


class ResourceStateView(View):
    """A label and its machines: the cluster state `get_cluster_state` returns."""

    resource: EphemeralResourceView
    machines: list[MachineShareView]
    machines_truncated: bool = False


class _Subject(BaseModel):
    """What an event, or a state in a snapshot, is about: the fields of both views (not a
    view itself, which would answer a route of its own)."""

    entitlement: str | None = None
    job: str | None = None
    task: int | None = None
    attempt: int | None = None
    machine: str | None = None
    operation: str | None = None
    shard: str | None = None
    state: str | None = None
    detail: str = ""


class RegionEventView(View, _Subject):
    """One event of `GET /v1/events`: `kind` (job.submitted, task.started, ...), the store
    `revision` of the change, and what it is about."""

    revision: int
    kind: str
    at: datetime


class RegionObjectView(View, _Subject):
    """One thing's state in a snapshot: a job, admission, task, task-status, operation, machine
    or shard (`what`)."""

    what: str


class RegionSnapshotView(View):
    """The state at `revision` of what a follower asked for, sent when the events it missed
    are no longer kept (after an `EventGapView`)."""

    revision: int
    objects: list[RegionObjectView]


class EventGapView(View):
    """The events after `last_event_id` are no longer kept: a snapshot follows instead."""

    type: str
    title: str
    status: int
    detail: str
    last_event_id: int
    kept_after: int


class AcceleratorShareView(View):
    """One job of a Gavel runner's round: where it runs, and its shares of the time."""

    job: str
    running_on: str = ""
    allocation: dict[str, float] = Field(default_factory=dict)
    received: dict[str, float] = Field(default_factory=dict)


class AcceleratorReportView(View):
    """The last round an entitlement's Gavel runner reported."""

    entitlement: str
    policy: str
    round_s: float
    rounds: int
    accelerators: dict[str, int] = Field(default_factory=dict)
    jobs: list[AcceleratorShareView] = Field(default_factory=list)
    updated_at: datetime
