"""Every key prefix of the region's keyspace, in one place.

Each prefix ends with "/" so that no prefix is the beginning of another, and ranges over one
never return keys of the other. Key segments are model names ([a-z0-9-]) and never contain "/".
"""

from __future__ import annotations

ROOT = "/tether/v1/"

MACHINES = ROOT + "machines/"  # machine id -> Machine (inventory: topology, capacity, labels)
HEARTBEATS = ROOT + "heartbeats/"  # machine id -> AgentHeartbeat, bound to the agent's lease
# machine id -> Allocation (owner, host profile; the unit of OCC), and under it
# <machine>/<entitlement>/<job>/<index> -> Resources (one task's, held on the machine)
ALLOCATIONS = ROOT + "allocations/"
ASSIGNMENTS = ROOT + "assignments/"  # <machine>/<entitlement>/<job>/<index> -> Assignment
ENTITLEMENTS = ROOT + "entitlements/"  # entitlement name -> Entitlement
QUOTA_FENCES = ROOT + "quota-fences/"  # entitlement name -> id of the allocator that grew it last
HOST_PROFILES = ROOT + "host-profiles/"  # profile name -> HostProfile
# <entitlement>/<name> -> ThroughputProfileRecord (accelerator throughputs, for Gavel's rounds)
THROUGHPUT_PROFILES = ROOT + "throughput-profiles/"
# entitlement name -> AcceleratorReport (its Gavel runner's last round, for the dashboard)
ACCELERATOR_REPORTS = ROOT + "accelerator-reports/"
# <entitlement>/<label> -> EphemeralResource (ESCHER's set_resource)
EPHEMERAL_RESOURCES = ROOT + "resources/"
JOBS = ROOT + "jobs/"  # <entitlement>/<job> -> Job
ADMISSIONS = ROOT + "admissions/"  # <entitlement>/<job> -> Admission
# tree root entitlement -> the decider that last admitted in the tree (compared by every admission)
QUOTA_LEDGERS = ROOT + "quota-ledgers/"
QUEUE_STATUS = (
    ROOT + "queue-status/"
)  # tree root entitlement -> QueueStatus, on its decider's lease
IDEMPOTENCY = ROOT + "idempotency/"  # <principal>/<key> -> job handle a submission created
# entitlement name -> who is deleting it, on a short lease: submissions and children compare it
ENTITLEMENT_DELETIONS = ROOT + "entitlement-deletions/"
TASKS = ROOT + "tasks/"  # <entitlement>/<job>/<index> -> Task (desired placement)
TASK_STATUS = ROOT + "task-status/"  # <entitlement>/<job>/<index> -> TaskStatus (from agents)
OPERATIONS = ROOT + "operations/"  # <entitlement>/<job>/<operation id> -> TaskOperation
CONTROLLERS = ROOT + "taskcontrollers/"  # registration id -> TaskController registration
# <entitlement>/<job> -> ControlStatus: the last TaskControl sequence number, the last failure
CONTROL_STATUS = ROOT + "taskcontrol-status/"
MAINTENANCE = ROOT + "maintenance/"  # notice id -> AdvanceNotice
SHARD_MAP = ROOT + "shards/map/"  # entitlement name -> shard id
SHARD_LEADERS = ROOT + "shards/leaders/"  # shard id -> ShardLeader, bound to its lease
# <shard>/<identity> -> ShardReplica: every replica in the election, bound to its lease
SHARD_REPLICAS = ROOT + "shards/replicas/"
SHARD_STATUS = ROOT + "shards/status/"  # shard id -> ShardStatus, on the leader's lease
ALLOCATORS = ROOT + "allocators/"  # replica id -> AllocatorEndpoint, bound to its lease
BROKERS = ROOT + "brokers/"  # <dc>/<instance> -> BrokerRegistration, bound to its lease
REGION = ROOT + "region/"  # "config" -> RegionConfig
PRINCIPALS = ROOT + "principals/"  # sha256(token) -> PrincipalRecord
# "leader" -> ShardLeader (group "rebalancer"), on its lease; "replicas/<identity>" -> its
# ShardReplica, on its lease; "runs/<id>" -> RebalanceRun
REBALANCER = ROOT + "rebalancer/"

ALL_PREFIXES: tuple[str, ...] = (
    MACHINES,
    HEARTBEATS,
    ALLOCATIONS,
    ASSIGNMENTS,
    ENTITLEMENTS,
    QUOTA_FENCES,
    HOST_PROFILES,
    THROUGHPUT_PROFILES,
    ACCELERATOR_REPORTS,
    EPHEMERAL_RESOURCES,
    JOBS,
    ADMISSIONS,
    QUOTA_LEDGERS,
    QUEUE_STATUS,
    IDEMPOTENCY,
    ENTITLEMENT_DELETIONS,
    TASKS,
    TASK_STATUS,
    OPERATIONS,
    CONTROLLERS,
    CONTROL_STATUS,
    MAINTENANCE,
    SHARD_MAP,
    SHARD_LEADERS,
    SHARD_REPLICAS,
    SHARD_STATUS,
    ALLOCATORS,
    BROKERS,
    REGION,
    PRINCIPALS,
    REBALANCER,
)


def _join(prefix: str, *segments: str) -> str:
    for segment in segments:
        if not segment or "/" in segment:
            raise ValueError(f"key segment {segment!r} must be non-empty and contain no '/'")
    return prefix + "/".join(segments)


def rebalancer_leader() -> str:
    return REBALANCER + "leader"


def rebalancer_replicas() -> str:
    """The prefix of every rebalancer replica's record."""
    return REBALANCER + "replicas/"


def rebalance_runs() -> str:
    """The prefix of every rebalancer run."""
    return REBALANCER + "runs/"


def rebalance_run(run_id: str) -> str:
    return _join(rebalance_runs(), run_id)


def machine(machine_id: str) -> str:
    return _join(MACHINES, machine_id)


def heartbeat(machine_id: str) -> str:
    return _join(HEARTBEATS, machine_id)


def allocation(machine_id: str) -> str:
    return _join(ALLOCATIONS, machine_id)


def allocation_entry(machine_id: str, entitlement_name: str, job_name: str, index: int) -> str:
    """One task's resources on a machine; written with its machine's `allocation` record."""
    return _join(ALLOCATIONS, machine_id, entitlement_name, job_name, str(index))


def allocation_entries(machine_id: str) -> str:
    """The prefix of every allocation entry of one machine."""
    return _join(ALLOCATIONS, machine_id) + "/"


def split_allocation(key: str) -> tuple[str, str | None]:
    """(machine id, task id `<entitlement>/<job>/<index>` or None) of a key under ALLOCATIONS:
    None for the machine's allocation record itself."""
    machine_id, _, task_id = key[len(ALLOCATIONS) :].partition("/")
    return machine_id, task_id or None


def assignment(machine_id: str, entitlement_name: str, job_name: str, index: int) -> str:
    return _join(ASSIGNMENTS, machine_id, entitlement_name, job_name, str(index))


def assignments_of(machine_id: str) -> str:
    """The prefix of every task assignment of one machine."""
    return _join(ASSIGNMENTS, machine_id) + "/"


def quota_fence(entitlement_name: str) -> str:
    """Bumped by every allocator transaction that adds to the entitlement's usage, so that two
    allocators cannot both fill the last of its quota on different machines."""
    return _join(QUOTA_FENCES, entitlement_name)


def entitlement(name: str) -> str:
    return _join(ENTITLEMENTS, name)


def host_profile(name: str) -> str:
    return _join(HOST_PROFILES, name)


def accelerator_report(entitlement_name: str) -> str:
    return _join(ACCELERATOR_REPORTS, entitlement_name)


def throughput_profile(entitlement_name: str, name: str) -> str:
    return _join(THROUGHPUT_PROFILES, entitlement_name, name)


def throughput_profiles_of(entitlement_name: str) -> str:
    return _join(THROUGHPUT_PROFILES, entitlement_name) + "/"


def ephemeral_resource(entitlement_name: str, label: str) -> str:
    return _join(EPHEMERAL_RESOURCES, entitlement_name, label)


def ephemeral_resources_of(entitlement_name: str) -> str:
    return _join(EPHEMERAL_RESOURCES, entitlement_name) + "/"


def job(entitlement_name: str, job_name: str) -> str:
    return _join(JOBS, entitlement_name, job_name)


def jobs_of(entitlement_name: str) -> str:
    """The prefix of every job of one entitlement."""
    return _join(JOBS, entitlement_name) + "/"


def admission(entitlement_name: str, job_name: str) -> str:
    return _join(ADMISSIONS, entitlement_name, job_name)


def admissions_of(entitlement_name: str) -> str:
    """Prefix of every admission record of the entitlement's jobs."""
    return _join(ADMISSIONS, entitlement_name) + "/"


def quota_ledger(root_entitlement: str) -> str:
    return _join(QUOTA_LEDGERS, root_entitlement)


def entitlement_deletion(name: str) -> str:
    return _join(ENTITLEMENT_DELETIONS, name)


def queue_status(root_entitlement: str) -> str:
    return _join(QUEUE_STATUS, root_entitlement)


def idempotency(principal_digest: str, key: str) -> str:
    return _join(IDEMPOTENCY, principal_digest, key)


def task(entitlement_name: str, job_name: str, index: int) -> str:
    return _join(TASKS, entitlement_name, job_name, str(index))


def tasks_of(entitlement_name: str, job_name: str) -> str:
    """The prefix of every task of one job."""
    return _join(TASKS, entitlement_name, job_name) + "/"


def tasks_of_entitlement(entitlement_name: str) -> str:
    """The prefix of every task of one entitlement's jobs."""
    return _join(TASKS, entitlement_name) + "/"


def task_status(entitlement_name: str, job_name: str, index: int) -> str:
    return _join(TASK_STATUS, entitlement_name, job_name, str(index))


def statuses_of(entitlement_name: str, job_name: str) -> str:
    """The prefix of every task status of one job."""
    return _join(TASK_STATUS, entitlement_name, job_name) + "/"


def statuses_of_entitlement(entitlement_name: str) -> str:
    """The prefix of every task status of one entitlement's jobs."""
    return _join(TASK_STATUS, entitlement_name) + "/"


def task_of_key(key: str) -> tuple[str, str, int]:
    """(entitlement, job, index) from a task, task-status or assignment key."""
    entitlement_name, job_name, index = key.rsplit("/", 3)[-3:]
    return entitlement_name, job_name, int(index)


def operation(entitlement_name: str, job_name: str, operation_id: str) -> str:
    return _join(OPERATIONS, entitlement_name, job_name, operation_id)


def operations_of(entitlement_name: str, job_name: str) -> str:
    """The prefix of every operation of one job."""
    return _join(OPERATIONS, entitlement_name, job_name) + "/"


def operations_of_entitlement(entitlement_name: str) -> str:
    """The prefix of every operation of an entitlement's jobs."""
    return _join(OPERATIONS, entitlement_name) + "/"


def control_status(entitlement_name: str, job_name: str) -> str:
    return _join(CONTROL_STATUS, entitlement_name, job_name)


def controller(registration_id: str) -> str:
    return _join(CONTROLLERS, registration_id)


def maintenance(notice_id: str) -> str:
    return _join(MAINTENANCE, notice_id)


def shard_assignment(entitlement_name: str) -> str:
    return _join(SHARD_MAP, entitlement_name)


def shard_leader(shard_id: str) -> str:
    return _join(SHARD_LEADERS, shard_id)


def shard_replicas(shard_id: str) -> str:
    """The prefix of every replica record of one shard."""
    return _join(SHARD_REPLICAS, shard_id) + "/"


def shard_status(shard_id: str) -> str:
    return _join(SHARD_STATUS, shard_id)


def allocator(replica_id: str) -> str:
    return _join(ALLOCATORS, replica_id)


def broker(dc: str, instance: str) -> str:
    return _join(BROKERS, dc, instance)


def brokers_of(dc: str) -> str:
    """The prefix of the registrations of the brokers running for one datacenter."""
    return _join(BROKERS, dc) + "/"


def region_config() -> str:
    return REGION + "config"


def principal(token_digest: str) -> str:
    return _join(PRINCIPALS, token_digest)


def last_segment(key: str) -> str:
    """The id at the end of a key, e.g. the machine id of a machine key."""
    return key.rsplit("/", 1)[-1]
