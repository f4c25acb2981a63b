"""Every model survives to_json -> from_json unchanged, and its JSON is stable."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tether.model
from tether.config import limit_settings
from tether.model import (
    MAX_MAINTENANCE_S,
    MAX_QUANTITY,
    ON_MACHINE_STATES,
    AcceleratorSpec,
    AdvanceNotice,
    Affinity,
    AgentHeartbeat,
    Allocation,
    AllocatorEndpoint,
    Assignment,
    AttributePredicate,
    BrokerRegistration,
    Constraint,
    ConstraintOp,
    ControllerRegistration,
    ControlStatus,
    DesiredState,
    Entitlement,
    FaultDomain,
    HostProfile,
    Job,
    JobKind,
    JobSpec,
    Machine,
    MachineState,
    MaintenanceKind,
    OnFull,
    OperationKind,
    OperationState,
    Placement,
    PreemptionPolicy,
    Preference,
    PrincipalRecord,
    Quota,
    RegionConfig,
    RegionState,
    Resources,
    RestartMode,
    RestartPolicy,
    Role,
    ShardLeader,
    ShardReplica,
    ShardStatus,
    Spread,
    Task,
    TaskOperation,
    TaskState,
    TaskStatus,
    TaskTemplate,
    TetherModel,
    Topology,
    UpdatePolicy,
    from_json,
    same_but_updated_at,
    to_json,
)
from tether.model.hostprofile import MAX_SWITCH_S
from tether.model.job import MAX_BACKOFF_S, MAX_EXPECTED_DURATION_S

names = st.from_regex(r"\A[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z")
handles = st.builds(lambda e, j: f"{e}/{j}", names, names)
versions = st.from_regex(r"\A[A-Za-z0-9._+-]{1,64}\Z")
identifiers = st.from_regex(r"\A[A-Za-z0-9-]{1,64}\Z")
attribute_keys = st.from_regex(r"\A[a-z0-9._/-]{1,63}\Z")
attribute_values = st.text(max_size=256)
principals = st.from_regex(r"\A[a-z0-9._@-]{1,128}\Z")
env_names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,20}\Z").filter(
    lambda n: not n.startswith("TETHER_")
)
quantities = st.one_of(st.integers(0, 1000), st.integers(0, MAX_QUANTITY))
utc_offsets = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timedelta(minutes=minutes))
timestamps = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.builds(
        timezone, st.integers(-14 * 60, 14 * 60).map(lambda m: timedelta(minutes=m))
    ),
)


def unique_lists(elements: st.SearchStrategy[Any], **kwargs: Any) -> st.SearchStrategy[list[Any]]:
    return st.lists(elements, unique=True, max_size=kwargs.pop("max_size", 4), **kwargs)


resources = st.builds(
    Resources,
    cpu=quantities,
    memory_mib=quantities,
    disk_gib=quantities,
    gpus=quantities,
    extra=st.dictionaries(names, quantities, max_size=3),
)
topologies = st.builds(Topology, region=names, dc=names, msb=names, rack=names)
host_profiles = st.builds(
    HostProfile,
    name=names,
    description=st.text(max_size=40),
    settings=st.dictionaries(st.text(max_size=20), st.text(max_size=20), max_size=3),
    switch_seconds=st.floats(0, MAX_SWITCH_S),
)
machines = st.builds(
    Machine,
    id=names,
    hostname=st.text(min_size=1, max_size=253),
    topology=topologies,
    hardware_type=names,
    capacity=resources,
    attributes=st.dictionaries(attribute_keys, attribute_values, max_size=4),
    host_profile_current=st.none() | names,
    state=st.sampled_from(MachineState),
)
quotas = st.builds(
    Quota, resources=resources, machines=st.dictionaries(names, quantities, max_size=3)
)


preemption_policies = st.builds(
    PreemptionPolicy,
    grace_s=st.floats(0, 3600),
    max_per_minute=quantities,
    max_per_job_per_hour=quantities,
)


@st.composite
def entitlements(draw: st.DrawFn) -> Entitlement:
    name = draw(names)
    parent = draw(st.none() | names.filter(lambda parent: parent != name))
    quota = draw(quotas)
    return Entitlement(
        name=name,
        parent=parent,
        quota=quota,
        borrowing_limit=draw(resources) if parent is not None else Resources(),
        lending_limit=draw(st.none() | st.just(quota.resources) | st.just(Resources())),
        preemption=draw(preemption_policies),
        host_profile=draw(st.none() | names),
        allowed_dcs=draw(unique_lists(names)),
        weight=draw(st.integers(1, 1000)),
        members=draw(unique_lists(principals)),
    )


restart_policies = st.builds(
    lambda mode, max_restarts, a, b: RestartPolicy(
        mode=mode,
        max_restarts=max_restarts,
        backoff_initial_s=min(a, b),
        backoff_max_s=max(a, b),
    ),
    st.sampled_from(RestartMode),
    quantities,
    st.floats(1e-6, MAX_BACKOFF_S),
    st.floats(1e-6, MAX_BACKOFF_S),
)
task_templates = st.builds(
    TaskTemplate,
    package=names,
    version=versions,
    command=st.text(min_size=1, max_size=40),
    args=st.lists(st.text(max_size=20), max_size=4),
    env=st.dictionaries(env_names, st.text(max_size=20), max_size=3),
    resources=resources,
    restart=restart_policies,
)
numbers = st.one_of(
    st.integers(-(10**200), 10**200).map(str),
    # repr writes an exponent past 1e16; NUMBER_PATTERN takes exponents up to 299.
    st.floats(-1e299, 1e299).map(repr),
)


@st.composite
def predicate_fields(draw: st.DrawFn) -> dict[str, Any]:
    """attribute/op/value/values, with the operands each operator takes."""
    op = draw(st.sampled_from(ConstraintOp))
    fields: dict[str, Any] = {"attribute": draw(attribute_keys), "op": op}
    if op in (ConstraintOp.IN, ConstraintOp.NOT_IN):
        fields["values"] = draw(st.lists(attribute_values, min_size=1, max_size=4))
    elif op in (ConstraintOp.GE, ConstraintOp.LE):
        fields["value"] = draw(numbers)
    elif op is not ConstraintOp.EXISTS:
        fields["value"] = draw(attribute_values)
    return fields


attribute_predicates = predicate_fields().map(lambda f: AttributePredicate(**f))
constraints = predicate_fields().map(lambda f: Constraint(**f))
preferences = st.builds(
    lambda f, weight: Preference(**f, weight=weight), predicate_fields(), st.integers(1, 100)
)
spreads = st.builds(Spread, level=st.sampled_from(FaultDomain), max_skew=st.integers(1, 10))
affinities = st.builds(
    Affinity, job=handles, level=st.sampled_from(["machine", "rack"]), anti=st.booleans()
)
placements = st.builds(
    Placement,
    constraints=st.lists(constraints, max_size=3),
    hardware_types=unique_lists(names),
    datacenters=unique_lists(names),
    preferences=st.lists(preferences, max_size=3),
    spread=spreads,
    affinities=st.lists(affinities, max_size=2),
    gang=st.booleans(),
)
update_policies = st.builds(UpdatePolicy, max_unavailable_percent=st.integers(1, 100))


accelerator_specs = st.builds(
    AcceleratorSpec,
    job_type=st.text(min_size=1, max_size=40),
    total_steps=st.floats(min_value=1e-3, max_value=1e12),
    scale_factor=st.integers(1, 64),
)


@st.composite
def job_specs(draw: st.DrawFn) -> JobSpec:
    kind = draw(st.sampled_from(JobKind))
    count = draw(st.integers(1, limit_settings().max_tasks_per_job))
    task = draw(task_templates)
    batch = draw(batch_fields(count)) if kind is JobKind.BATCH else {}
    if kind is JobKind.BATCH and draw(st.booleans()):
        # A Gavel job: a whole gang of `count` workers, one GPU each.
        gang = draw(accelerator_specs).model_copy(update={"scale_factor": count})
        task = task.model_copy(update={"resources": task.resources.model_copy(update={"gpus": 1})})
        batch |= {"accelerator": gang, "min_count": None}
    return JobSpec(
        name=draw(names),
        entitlement=draw(names),
        count=count,
        task=task,
        placement=draw(placements),
        priority=draw(st.integers(0, 1000)),
        kind=kind,
        update=draw(update_policies),
        on_full=draw(st.none() | st.sampled_from(OnFull)),
        **batch,
    )


@st.composite
def batch_fields(draw: st.DrawFn, count: int) -> dict[str, Any]:
    return {
        "deadline": draw(st.none() | timestamps),
        "expected_duration_s": draw(st.none() | st.floats(1e-6, MAX_EXPECTED_DURATION_S)),
        "min_count": draw(st.none() | st.integers(1, count)),
        "suspended": draw(st.booleans()),
    }


jobs = st.builds(
    Job,
    spec=job_specs(),
    generation=quantities,
    created_at=timestamps,
    updated_at=timestamps,
    deleting=st.booleans(),
)


@st.composite
def tasks(draw: st.DrawFn) -> Task:
    state = draw(st.sampled_from(TaskState))
    on_machine = state in ON_MACHINE_STATES
    return Task(
        job=draw(handles),
        index=draw(quantities),
        generation=draw(quantities),
        machine=draw(names if on_machine else st.none() | names),
        desired=draw(st.sampled_from(DesiredState)),
        state=state,
        attempt=draw(quantities),
        restarts=draw(quantities),
        version=draw(versions),
        message=draw(st.text(max_size=40)),
        updated_at=draw(timestamps),
    )


@st.composite
def task_operations(draw: st.DrawFn) -> TaskOperation:
    kind = draw(st.sampled_from(OperationKind))
    return TaskOperation(
        id=draw(identifiers),
        kind=kind,
        job=draw(handles),
        tasks=draw(unique_lists(quantities, min_size=1)),
        reason=draw(st.text(max_size=40)),
        state=draw(st.sampled_from(OperationState)),
        created_at=draw(timestamps),
        updated_at=draw(timestamps),
        deadline=draw(st.none() | timestamps),
        target_version=draw(versions) if kind is OperationKind.UPDATE else None,
        target_machine=draw(st.none() | names) if kind is OperationKind.MOVE else None,
        attempt=draw(st.none() | quantities),
        notice=draw(st.none() | identifiers),
    )


advance_notices = st.builds(
    AdvanceNotice,
    id=identifiers,
    machines=unique_lists(names, min_size=1),
    start=timestamps,
    duration_s=st.integers(1, MAX_MAINTENANCE_S),
    kind=st.sampled_from(MaintenanceKind),
    reason=st.text(max_size=40),
)

task_statuses = st.builds(
    TaskStatus,
    job=handles,
    index=quantities,
    machine=names,
    attempt=quantities,
    state=st.sampled_from(TaskState),
    pid=st.none() | st.integers(1, 2**22),
    exit_code=st.none() | st.integers(-64, 255),
    message=st.text(max_size=40),
    limits=st.sampled_from(["", "cgroup-v2", "rlimit"]),
    started_at=st.none() | timestamps,
    finished_at=st.none() | timestamps,
    updated_at=timestamps,
)

assignments = st.builds(
    Assignment,
    job=handles,
    index=quantities,
    attempt=quantities,
    generation=quantities,
    desired=st.sampled_from(DesiredState),
    template=task_templates,
)

allocations = st.builds(
    Allocation,
    machine=names,
    entitlement=st.none() | names,
    host_profile=st.none() | names,
    idle_since=st.none() | timestamps,
)
principal_records = st.builds(
    PrincipalRecord, name=principals, roles=unique_lists(st.sampled_from(Role))
)
region_configs = st.builds(
    RegionConfig,
    name=names,
    shards=unique_lists(names, min_size=1),
    draining=unique_lists(names),
    non_preemptible_priority=st.integers(0, 1001),
    created_at=timestamps,
)
shard_leaders = st.builds(
    ShardLeader,
    shard=names,
    identity=st.text(min_size=1, max_size=40),
    pid=st.integers(1, 2**22),
    since=timestamps,
)
shard_replicas = st.builds(
    ShardReplica,
    shard=names,
    identity=st.text(min_size=1, max_size=40),
    pid=st.integers(1, 2**22),
    since=timestamps,
)
shard_statuses = st.builds(
    ShardStatus,
    shard=names,
    identity=st.text(min_size=1, max_size=40),
    jobs=st.integers(0, 10**6),
    backlog=st.integers(0, 10**6),
    reconciles=st.integers(0, 10**9),
    last_reconcile_at=st.none() | timestamps,
    updated_at=timestamps,
)
allocator_endpoints = st.builds(
    AllocatorEndpoint,
    id=st.text(min_size=1, max_size=20),
    address=st.text(min_size=1, max_size=40),
    pid=st.integers(1, 2**22),
    since=timestamps,
)
broker_registrations = st.builds(
    BrokerRegistration, dc=names, pid=st.integers(1, 2**22), since=timestamps
)
agent_heartbeats = st.builds(
    AgentHeartbeat,
    machine=machines,
    address=st.text(min_size=1, max_size=40),
    pid=st.integers(1, 2**22),
    started_at=timestamps,
)
controller_registrations = st.builds(
    lambda entitlement, job, **fields: ControllerRegistration(
        entitlement=entitlement, job=None if job is None else f"{entitlement}/{job}", **fields
    ),
    names,
    st.none() | names,
    id=identifiers,
    endpoint=st.builds(lambda host, port: f"{host}:{port}", names, st.integers(1, 65535)),
    principal=principals,
    ttl_s=st.integers(1, 3600),
    lease=st.integers(0, 2**62),
    expires_at=timestamps,
)
control_statuses = st.builds(
    ControlStatus,
    sequence=quantities,
    controller=st.text(max_size=40),
    error=st.text(max_size=40),
    failures=quantities,
    updated_at=st.none() | timestamps,
)
paths = st.builds(lambda parts: Path("/", *parts), st.lists(names, max_size=3))
service_names = st.lists(names, max_size=4)
region_states = st.builds(
    RegionState,
    pid=st.integers(1, 2**22),
    url=st.text(min_size=1, max_size=40),
    urls=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=3),
    docs_url=st.text(min_size=1, max_size=40),
    registry_address=st.text(min_size=1, max_size=40),
    admin_token_file=paths,
    store=st.text(min_size=1, max_size=40),
    etcd_pid=st.integers(0, 2**22),
    logs=paths,
    started_at=timestamps,
    metrics=st.dictionaries(names, st.text(min_size=1, max_size=40), max_size=4),
    commands=st.dictionaries(names, st.lists(st.text(max_size=20), max_size=4), max_size=4),
    processes=st.dictionaries(names, st.integers(1, 2**22), max_size=4),
    restarts=st.dictionaries(names, st.integers(0, 100), max_size=4),
    dead=service_names,
)

STRATEGIES: dict[type[TetherModel], st.SearchStrategy[Any]] = {
    AcceleratorSpec: accelerator_specs,
    Resources: resources,
    Topology: topologies,
    HostProfile: host_profiles,
    Machine: machines,
    Quota: quotas,
    PreemptionPolicy: preemption_policies,
    Entitlement: entitlements(),
    RestartPolicy: restart_policies,
    TaskTemplate: task_templates,
    AttributePredicate: attribute_predicates,
    Constraint: constraints,
    Preference: preferences,
    Spread: spreads,
    Affinity: affinities,
    Placement: placements,
    UpdatePolicy: update_policies,
    JobSpec: job_specs(),
    Job: jobs,
    Task: tasks(),
    TaskOperation: task_operations(),
    AdvanceNotice: advance_notices,
    TaskStatus: task_statuses,
    Assignment: assignments,
    Allocation: allocations,
    PrincipalRecord: principal_records,
    RegionConfig: region_configs,
    ShardLeader: shard_leaders,
    ShardReplica: shard_replicas,
    ShardStatus: shard_statuses,
    AllocatorEndpoint: allocator_endpoints,
    BrokerRegistration: broker_registrations,
    AgentHeartbeat: agent_heartbeats,
    ControllerRegistration: controller_registrations,
    ControlStatus: control_statuses,
    RegionState: region_states,
}


def test_every_exported_model_has_a_strategy() -> None:
    exported = {
        obj
        for name in tether.model.__all__
        if inspect.isclass(obj := getattr(tether.model, name))
        and issubclass(obj, TetherModel)
        and obj is not TetherModel
    }
    assert exported == set(STRATEGIES)


@pytest.mark.parametrize("model_type", list(STRATEGIES), ids=lambda t: t.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_json_roundtrip(model_type: type[TetherModel], data: st.DataObject) -> None:
    model = data.draw(STRATEGIES[model_type])
    assert type(model) is model_type
    encoded = to_json(model)
    decoded = from_json(model_type, encoded)
    assert decoded == model
    # Byte-stable: the store compares values, so re-encoding must not change them.
    assert to_json(decoded) == encoded
    assert from_json(model_type, encoded.decode()) == model


def test_a_status_that_differs_only_in_its_update_time_is_the_same() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    first = ShardStatus(
        shard="shard-0", identity="a", jobs=1, backlog=0, reconciles=3, updated_at=at
    )
    later = first.model_copy(update={"updated_at": at + timedelta(seconds=5)})
    assert same_but_updated_at(first, later)
    assert not same_but_updated_at(first, later.model_copy(update={"reconciles": 4}))
