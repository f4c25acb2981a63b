"""What the REST API returns, as typed read-only views that ignore fields they do not know."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

RUNNING = "running"
"""The task state a started process reports; `tether job submit --wait` waits for it."""


class View(BaseModel):
    """A response object: unknown fields are ignored so newer frontends stay readable."""

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
    entitlement: str = ""
    name: str = ""
    count: int = 0
    generation: int = 0
    deleting: bool = False
    created_at: datetime | None = None
    updated_at: datetime | None = None
    spec: dict[str, Any] = Field(default_factory=dict)
    tasks: dict[str, int] = Field(default_factory=dict)
    """Task count by effective state."""
    running: int = 0
    operations: dict[str, int] | None = None
    """Open task operations by state (only when showing one job)."""
    control: ControlView | None = None
    """How asking the job's TaskController goes (only when showing one job)."""


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
    tasks: list[int]
    reason: str = ""
    state: str
    created_at: datetime | None = None
    deadline: datetime | None = None
    target_version: str | None = None


class MaintenanceView(View):
    """Planned maintenance of machines."""

    id: str
    machines: list[str]
    start: datetime
    end: datetime
    duration_s: int
    kind: str
    reason: str = ""
    phase: str


class MachineDrainView(View):
    """The notice draining (or decommissioning) a machine; `created` is False when it was
    already draining under it and nothing changed."""

    machine: str
    created: bool
    notice: MaintenanceView


class MachineUndrainView(View):
    """The drain and decommission notices an undrain cancelled (none: there were none)."""

    machine: str
    cancelled: list[MaintenanceView] = Field(default_factory=list)


class TaskView(View):
    """One task with its effective state."""

    task_id: str = ""
    index: int
    state: str
    desired: str = ""
    machine: str | None = None
    attempt: int = 0
    restarts: int = 0
    generation: int = 0
    version: str = ""
    pid: int | None = None
    exit_code: int | None = None
    message: str | None = None
    started_at: datetime | None = None
    updated_at: datetime | None = None


class TopologyView(View):
    """Where a machine sits."""

    region: str = ""
    dc: str = ""
    msb: str = ""
    rack: str = ""


class MachineView(View):
    """A machine with its capacity, what its tasks hold, and whether its agent is alive."""

    id: str
    hostname: str = ""
    topology: TopologyView = Field(default_factory=TopologyView)
    hardware_type: str = ""
    state: str = ""
    entitlement: str | None = None
    capacity: ResourcesView = Field(default_factory=ResourcesView)
    allocated: ResourcesView = Field(default_factory=ResourcesView)
    free: ResourcesView = Field(default_factory=ResourcesView)
    tasks: int = 0
    heartbeat: bool = False


class ShardView(View):
    """A scheduler shard, its current leader (if any) and its entitlements."""

    shard: str
    leader: str | None = None
    leader_since: datetime | None = None
    entitlements: list[str] = Field(default_factory=list)


class ReplicaView(View):
    """A scheduler replica standing by."""

    identity: str
    pid: int | None = None
    since: datetime | None = None


class ShardDetailView(ShardView):
    """A shard with its replicas, its leader's last report and what it holds (admin view)."""

    draining: bool = False
    leader_pid: int | None = None
    lease_expires_at: datetime | None = None
    standbys: list[ReplicaView] = Field(default_factory=list)
    last_reconcile_at: datetime | None = None
    reconciles: int | None = None
    backlog: int | None = None
    reported_at: datetime | None = None
    jobs: int = 0
    tasks: int = 0
    machines: int = 0
    operations: int = 0
    warning: str | None = None
    """Why its entitlements' jobs are not scheduled (it has no leader); None when they are."""


class ShardMoveView(View):
    """An entitlement moved between shards."""

    entitlement: str
    from_shard: str
    to_shard: str
    revision: int = 0


class ShardDrainView(View):
    """A drained shard and the moves that emptied it."""

    shard: str
    moves: list[ShardMoveView] = Field(default_factory=list)


class ShardFailoverView(View):
    """A failover under way: the leader that was deposed and who may take over."""

    shard: str
    previous_leader: str
    standbys: list[ReplicaView] = Field(default_factory=list)


class AllocatorView(View):
    """A live allocator replica."""

    id: str
    address: str = ""
    pid: int | None = None
    since: datetime | None = None


class RegionView(View):
    """The region at a glance."""

    name: str = ""
    shards: list[ShardView] = Field(default_factory=list)
    allocators: list[AllocatorView] = Field(default_factory=list)
    machines: dict[str, int] = Field(default_factory=dict)
    """Machine count: `total`, `up`, `down`, ..."""
    jobs: int = 0
    tasks: dict[str, int] = Field(default_factory=dict)
    """Task count by effective state."""


class PlacementRuleView(View):
    """One hard placement rule and how many machines it rejected that earlier rules let through."""

    rule: str
    machines_rejected: int = 0
    detail: str = ""


class PlacementPreferenceView(View):
    """One preference rule of the job, its weight, and how many fitting machines match it."""

    rule: str
    weight: int = 0
    machines_matching: int = 0


class ChosenMachineView(View):
    """A machine holding tasks of the job, and its rank for one more task (0: it takes none)."""

    machine: str
    tasks: list[int] = Field(default_factory=list)
    rank: int = 0
    preferences: list[str] = Field(default_factory=list)


class PlacementView(View):
    """An allocator's explanation of a job's placement."""

    job: str
    summary: str = ""
    machines_considered: int = 0
    machines_fitting: int = 0
    entitlement_machines: int = 0
    rules: list[PlacementRuleView] = Field(default_factory=list)
    """Hard rules in the order they were applied."""
    preferences: list[PlacementPreferenceView] = Field(default_factory=list)
    chosen: list[ChosenMachineView] = Field(default_factory=list)


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
    roles: list[str] = Field(default_factory=list)
    token: str
