"""Invalid input is rejected with an error that names the field and says what is wrong."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tether.config import limit_settings
from tether.model import (
    NAME_RULE,
    AdvanceNotice,
    ConstraintOp,
    Entitlement,
    Job,
    JobKind,
    JobSpec,
    Machine,
    OnFull,
    Resources,
    RestartPolicy,
    Task,
    TaskOperation,
    TaskState,
    from_json,
)

LOC = tuple[str | int, ...]
LIMIT_ENV = "TETHER_LIMITS_MAX_TASKS_PER_JOB"


def job_json(**overrides: Any) -> dict[str, Any]:
    """A minimal valid job spec as a JSON object, with top-level fields replaced."""
    spec: dict[str, Any] = {
        "name": "web",
        "entitlement": "team-a",
        "count": 3,
        "task": {
            "package": "web-server",
            "version": "1.4.2",
            "command": "bin/serve",
            "resources": {"cpu": 1000, "memory_mib": 512},
        },
    }
    spec.update(overrides)
    return spec


def task_json(**overrides: Any) -> dict[str, Any]:
    """The task template of `job_json` with fields replaced."""
    task: dict[str, Any] = job_json()["task"]
    task.update(overrides)
    return task


def errors(validate: Callable[[], object]) -> list[Any]:
    with pytest.raises(ValidationError) as raised:
        validate()
    return raised.value.errors()


def job_errors(spec: dict[str, Any]) -> list[Any]:
    return errors(lambda: from_json(JobSpec, json.dumps(spec)))


def error_at(errs: list[Any], loc: LOC) -> str:
    """The message of the only error at `loc`; fails if there is none or several errors."""
    assert [e["loc"] for e in errs] == [loc], errs
    message: str = errs[0]["msg"]
    return message


@contextmanager
def _task_limit_env(monkeypatch: pytest.MonkeyPatch, limit: int | None) -> Iterator[None]:
    """Run with max_tasks_per_job from `limit`, or from the default when None."""
    with monkeypatch.context() as patch:
        if limit is None:
            patch.delenv(LIMIT_ENV, raising=False)
        else:
            patch.setenv(LIMIT_ENV, str(limit))
        limit_settings.cache_clear()
        yield
    limit_settings.cache_clear()


@pytest.fixture
def task_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Lower the region's max_tasks_per_job to 5 for one test."""
    with _task_limit_env(monkeypatch, 5):
        yield 5


@pytest.fixture
def default_task_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Ignore a max_tasks_per_job set in the environment running the tests."""
    with _task_limit_env(monkeypatch, None):
        yield


def test_the_minimal_job_is_valid() -> None:
    spec = from_json(JobSpec, json.dumps(job_json()))
    assert spec.handle == "team-a/web"
    assert spec.kind is JobKind.SERVICE


@pytest.mark.parametrize(
    ("field", "loc"),
    [
        ("cpu", ("task", "resources", "cpu")),
        ("memory_mib", ("task", "resources", "memory_mib")),
        ("gpus", ("task", "resources", "gpus")),
    ],
)
def test_negative_resources_are_rejected(field: str, loc: LOC) -> None:
    spec = job_json(task=task_json(resources={field: -1}))
    assert "greater than or equal to 0" in error_at(job_errors(spec), loc)


def test_negative_extra_resource_is_rejected() -> None:
    msg = error_at(errors(lambda: from_json(Resources, '{"extra": {"ssd": -2}}')), ("extra", "ssd"))
    assert "greater than or equal to 0" in msg


def test_resources_beyond_max_quantity_are_rejected() -> None:
    msg = error_at(errors(lambda: from_json(Resources, '{"cpu": 9007199254740992}')), ("cpu",))
    assert "less than or equal to 9007199254740991" in msg


def test_extra_resource_names_must_be_names() -> None:
    msg = error_at(
        errors(lambda: from_json(Resources, '{"extra": {"GPU_X": 1}}')),
        ("extra", "GPU_X", "[key]"),
    )
    assert msg == NAME_RULE


@pytest.mark.parametrize(
    ("spec", "loc"),
    [
        (job_json(replicas=3), ("replicas",)),
        (job_json(task=task_json(image="nginx")), ("task", "image")),
        (job_json(placement={"spreed": {"level": "rack"}}), ("placement", "spreed")),
    ],
)
def test_unknown_fields_are_rejected(spec: dict[str, Any], loc: LOC) -> None:
    errs = job_errors(spec)
    assert "Extra inputs are not permitted" in error_at(errs, loc)
    assert errs[0]["type"] == "extra_forbidden"


def test_count_zero_is_rejected() -> None:
    assert "greater than or equal to 1" in error_at(job_errors(job_json(count=0)), ("count",))


def test_count_above_the_region_limit_names_the_limit_and_how_to_raise_it(
    task_limit: int,
) -> None:
    assert from_json(JobSpec, json.dumps(job_json(count=task_limit))).count == task_limit
    msg = error_at(job_errors(job_json(count=task_limit + 1)), ("count",))
    assert f"at most {task_limit}" in msg
    assert "max_tasks_per_job" in msg
    assert "TETHER_LIMITS_MAX_TASKS_PER_JOB" in msg


def test_a_stored_job_loads_after_the_limit_is_lowered(task_limit: int) -> None:
    stored = json.dumps(
        {
            "spec": job_json(count=task_limit + 10),
            "generation": 1,
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )
    # Read back from the store, an accepted job still loads; as new input, it is refused.
    assert from_json(Job, stored, stored=True).spec.count == task_limit + 10
    with pytest.raises(ValidationError, match="at most"):
        from_json(Job, stored)


def test_count_limit_defaults_to_the_settings_value() -> None:
    limit = limit_settings().max_tasks_per_job
    assert from_json(JobSpec, json.dumps(job_json(count=limit))).count == limit
    assert f"at most {limit}" in error_at(job_errors(job_json(count=limit + 1)), ("count",))


def test_unknown_constraint_operator_lists_the_allowed_ones() -> None:
    spec = job_json(placement={"constraints": [{"attribute": "os", "op": "~=", "value": "1"}]})
    msg = error_at(job_errors(spec), ("placement", "constraints", 0, "op"))
    for op in ConstraintOp:
        assert f"'{op.value}'" in msg


@pytest.mark.parametrize(
    "name",
    ["Web", "web_api", "a" * 64, "-web", "web-", "", "wéb", "web\n"],
)
def test_invalid_names_are_rejected_with_the_rule(name: str) -> None:
    errs = job_errors(job_json(name=name))
    msg = error_at(errs, ("name",))
    assert msg.startswith("must be 1-63 characters of a-z, 0-9 and '-'")
    assert msg == NAME_RULE
    assert errs[0]["type"] == "invalid_name"


@pytest.mark.parametrize("name", ["a", "0", "web-2", "a" * 63])
def test_valid_names_are_accepted(name: str) -> None:
    assert from_json(JobSpec, json.dumps(job_json(name=name))).name == name


def test_non_string_name_is_a_type_error() -> None:
    assert "valid string" in error_at(job_errors(job_json(name=7)), ("name",))


def test_reserved_tether_env_var_is_rejected() -> None:
    spec = job_json(task=task_json(env={"PORT": "80", "TETHER_TASK_ID": "x"}))
    msg = error_at(job_errors(spec), ("task", "env", "TETHER_TASK_ID", "[key]"))
    assert "TETHER_" in msg
    assert "reserved" in msg


@pytest.mark.parametrize("env_name", ["1PORT", "MY-VAR", "A B", ""])
def test_malformed_env_var_names_are_rejected(env_name: str) -> None:
    spec = job_json(task=task_json(env={env_name: "x"}))
    msg = error_at(job_errors(spec), ("task", "env", env_name, "[key]"))
    assert "letters, digits and '_'" in msg


def test_deadline_on_a_service_job_is_rejected() -> None:
    spec = job_json(deadline="2030-01-01T00:00:00Z")
    msg = error_at(job_errors(spec), ("deadline",))
    assert "only batch jobs may set deadline" in msg
    assert "'service'" in msg


def accelerator_job(**overrides: Any) -> dict[str, Any]:
    """A Gavel training job: a gang of 3 workers, one GPU each."""
    gang = {"job_type": "ResNet-50 (batch size 64)", "total_steps": 1000, "scale_factor": 3}
    return job_json(
        kind="batch",
        accelerator=gang | overrides,
        task=task_json(resources={"cpu": 1000, "memory_mib": 512, "gpus": 1}),
    )


def test_an_accelerator_job_is_a_batch_gang_of_one_gpu_workers() -> None:
    spec = from_json(JobSpec, json.dumps(accelerator_job()))
    assert spec.accelerator is not None
    assert (spec.accelerator.scale_factor, spec.accelerator.total_steps) == (3, 1000.0)
    service = accelerator_job() | {"kind": "service"}
    assert "only batch jobs may set accelerator" in error_at(job_errors(service), ("accelerator",))
    wrong_gang = error_at(job_errors(accelerator_job(scale_factor=2)), ("accelerator",))
    assert "scale_factor (2) must be the job's count (3)" in wrong_gang
    two_gpus = accelerator_job()
    two_gpus["task"]["resources"]["gpus"] = 2
    assert "exactly 1 GPU, not 2" in error_at(job_errors(two_gpus), ("accelerator",))
    elastic = accelerator_job() | {"min_count": 1}
    assert "runs whole" in error_at(job_errors(elastic), ("accelerator",))
    no_steps = error_at(job_errors(accelerator_job(total_steps=0)), ("accelerator", "total_steps"))
    assert "greater than 0" in no_steps


def test_deadline_on_a_batch_job_is_accepted_when_timezone_aware() -> None:
    spec = from_json(JobSpec, json.dumps(job_json(kind="batch", deadline="2030-01-01T00:00:00Z")))
    assert spec.deadline == datetime(2030, 1, 1, tzinfo=UTC)
    naive = job_json(kind="batch", deadline="2030-01-01T00:00:00")
    assert "timezone" in error_at(job_errors(naive), ("deadline",))


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        ({"attribute": "dc", "op": "in"}, "operator 'in' needs a non-empty 'values'"),
        ({"attribute": "dc", "op": "not_in", "values": []}, "operator 'not_in' needs"),
        (
            {"attribute": "dc", "op": "in", "value": "a", "values": ["a"]},
            "and no 'value'",
        ),
        ({"attribute": "gpu", "op": "exists", "value": "x"}, "neither 'value' nor 'values'"),
        ({"attribute": "os", "op": "=="}, "operator '==' needs a 'value'"),
        ({"attribute": "os", "op": "!=", "values": ["a"]}, "operator '!=' needs a 'value'"),
        ({"attribute": "cores", "op": ">=", "value": "many"}, "'many' is not a number such as 64"),
        ({"attribute": "cores", "op": "<=", "value": "nan"}, "'nan' is not a number such as 64"),
        # Infinite as a float: the schema's pattern leaves it out too.
        ({"attribute": "cores", "op": ">=", "value": "1e999"}, "'1e999' is not a number"),
    ],
)
def test_constraint_operands_must_match_the_operator(
    constraint: dict[str, Any], expected: str
) -> None:
    spec = job_json(placement={"constraints": [constraint]})
    assert expected in error_at(job_errors(spec), ("placement", "constraints", 0))


def test_preferences_share_the_operand_rules() -> None:
    spec = job_json(placement={"preferences": [{"attribute": "dc", "op": "in", "weight": 2}]})
    msg = error_at(job_errors(spec), ("placement", "preferences", 0))
    assert "'values'" in msg


def test_numeric_constraint_accepts_numbers() -> None:
    spec = job_json(
        placement={"constraints": [{"attribute": "cores", "op": ">=", "value": "1.5e1"}]}
    )
    assert from_json(JobSpec, json.dumps(spec)).placement.constraints[0].value == "1.5e1"


def test_invalid_attribute_key_is_rejected() -> None:
    spec = job_json(placement={"constraints": [{"attribute": "OS Version", "op": "exists"}]})
    msg = error_at(job_errors(spec), ("placement", "constraints", 0, "attribute"))
    assert "1-63 characters of a-z, 0-9, '.', '_', '/' and '-'" in msg


def test_duplicate_datacenters_are_rejected() -> None:
    spec = job_json(placement={"datacenters": ["dc1", "dc2", "dc1"]})
    assert "'dc1'" in error_at(job_errors(spec), ("placement", "datacenters"))


def test_backoff_initial_above_max_is_rejected() -> None:
    msg = error_at(
        errors(lambda: from_json(RestartPolicy, '{"backoff_initial_s": 120}')),
        ("backoff_max_s",),
    )
    assert "at least backoff_initial_s (120.0)" in msg


def test_infinite_backoff_is_rejected() -> None:
    errs = errors(lambda: RestartPolicy(backoff_max_s=float("inf")))
    assert "finite number" in error_at(errs, ("backoff_max_s",))


@pytest.mark.parametrize(
    ("field", "value", "loc", "expected"),
    [
        ("priority", 1001, ("priority",), "less than or equal to 1000"),
        ("priority", -1, ("priority",), "greater than or equal to 0"),
        (
            "update",
            {"max_unavailable_percent": 0},
            ("update", "max_unavailable_percent"),
            "greater than or equal to 1",
        ),
        (
            "placement",
            {"spread": {"max_skew": 0}},
            ("placement", "spread", "max_skew"),
            "greater than or equal to 1",
        ),
    ],
)
def test_bounded_job_fields(field: str, value: Any, loc: LOC, expected: str) -> None:
    assert expected in error_at(job_errors(job_json(**{field: value})), loc)


def test_version_charset_is_enforced() -> None:
    spec = job_json(task=task_json(version="1.0 beta"))
    assert "A-Z, a-z, 0-9" in error_at(job_errors(spec), ("task", "version"))


def test_affinity_to_a_malformed_job_handle_is_rejected() -> None:
    spec = job_json(placement={"affinities": [{"job": "cache", "anti": True}]})
    msg = error_at(job_errors(spec), ("placement", "affinities", 0, "job"))
    assert "'<entitlement>/<job>'" in msg


def test_strict_python_mode_rejects_strings_that_json_mode_accepts() -> None:
    # The reason all external input goes through from_json.
    errs = errors(lambda: JobSpec.model_validate(job_json(kind="batch")))
    assert error_at(errs, ("kind",)).startswith("Input should be an instance of JobKind")
    assert from_json(JobSpec, json.dumps(job_json(kind="batch"))).kind is JobKind.BATCH


def test_models_are_frozen() -> None:
    spec = from_json(JobSpec, json.dumps(job_json()))
    with pytest.raises(ValidationError, match="frozen"):
        spec.count = 4  # type: ignore[misc]


def _operation(**overrides: Any) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "id": "6f1c2a9e-3b7d-4c1e-9a51-0d2f8e4b7c10",
        "kind": "restart",
        "job": "team-a/web",
        "tasks": [0, 1],
        "reason": "config push",
        "created_at": "2030-01-01T00:00:00Z",
        "updated_at": "2030-01-01T00:00:00Z",
    }
    operation.update(overrides)
    return operation


def operation_errors(**overrides: Any) -> list[Any]:
    return errors(lambda: from_json(TaskOperation, json.dumps(_operation(**overrides))))


def test_update_operation_needs_a_target_version() -> None:
    msg = error_at(operation_errors(kind="update"), ("target_version",))
    assert "needs a target version" in msg
    assert from_json(TaskOperation, json.dumps(_operation(kind="update", target_version="2.0")))


def test_target_version_is_only_for_updates() -> None:
    msg = error_at(operation_errors(target_version="2.0"), ("target_version",))
    assert "only update operations" in msg
    assert "'restart'" in msg


def test_target_machine_is_only_for_moves() -> None:
    msg = error_at(operation_errors(target_machine="m-1"), ("target_machine",))
    assert "only move operations" in msg
    moved = from_json(TaskOperation, json.dumps(_operation(kind="move", target_machine="m-1")))
    assert moved.target_machine == "m-1"


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ([], "at least 1 item"),
        ([2, 2], "has 2 more than once"),
        ([-1], "greater than or equal to 0"),
    ],
)
def test_operation_tasks(tasks: list[int], expected: str) -> None:
    errs = operation_errors(tasks=tasks)
    assert errs
    assert all(e["loc"][0] == "tasks" for e in errs)
    assert expected in errs[0]["msg"]


def test_operation_id_charset() -> None:
    assert "A-Z, a-z, 0-9 and '-'" in error_at(operation_errors(id="op/1"), ("id",))


def test_entitlement_cannot_be_its_own_parent() -> None:
    errs = errors(lambda: from_json(Entitlement, '{"name": "team-a", "parent": "team-a"}'))
    assert "own parent" in error_at(errs, ("parent",))


def test_entitlement_members_are_principals() -> None:
    errs = errors(lambda: from_json(Entitlement, '{"name": "team-a", "members": ["Alice"]}'))
    assert "a-z, 0-9, '.', '_', '@' and '-'" in error_at(errs, ("members", 0))


def test_entitlement_weight_is_positive() -> None:
    errs = errors(lambda: from_json(Entitlement, '{"name": "team-a", "weight": 0}'))
    assert "greater than or equal to 1" in error_at(errs, ("weight",))


def entitlement_errors(**fields: Any) -> list[Any]:
    return errors(lambda: from_json(Entitlement, json.dumps({"name": "team-a", **fields})))


def test_only_an_entitlement_with_a_parent_borrows() -> None:
    msg = error_at(entitlement_errors(borrowing_limit={"cpu": 1}), ("borrowing_limit",))
    assert "only an entitlement with a parent can borrow" in msg
    child = from_json(
        Entitlement, '{"name": "team-a", "parent": "org", "borrowing_limit": {"cpu": 1}}'
    )
    assert child.borrowing_limit.cpu == 1


def test_an_entitlement_lends_at_most_its_quota() -> None:
    errs = entitlement_errors(
        quota={"resources": {"cpu": 4000}}, lending_limit={"cpu": 5000, "gpus": 1}
    )
    msg = error_at(errs, ("lending_limit",))
    assert "cannot lend more than its own quota" in msg
    assert "cpu: need 5000 millicores, 4000 free" in msg
    assert "gpus: need 1, 0 free" in msg


@pytest.mark.parametrize(
    ("limit", "loc"),
    [
        ({"borrowing_limit": {"cpu": -1}}, ("borrowing_limit", "cpu")),
        ({"lending_limit": {"memory_mib": -5}}, ("lending_limit", "memory_mib")),
        ({"preemption": {"grace_s": -1}}, ("preemption", "grace_s")),
        ({"preemption": {"grace_s": 3601}}, ("preemption", "grace_s")),
        ({"preemption": {"max_per_minute": -1}}, ("preemption", "max_per_minute")),
    ],
)
def test_negative_limits_are_rejected(limit: dict[str, Any], loc: LOC) -> None:
    error_at(entitlement_errors(parent="org", **limit), loc)


@pytest.mark.parametrize("field", ["min_count", "expected_duration_s"])
def test_elastic_and_duration_fields_are_only_for_batch_jobs(field: str) -> None:
    msg = error_at(job_errors(job_json(**{field: 1})), (field,))
    assert f"only batch jobs may set {field}" in msg


def test_min_count_is_at_most_count() -> None:
    msg = error_at(job_errors(job_json(kind="batch", count=3, min_count=4)), ("min_count",))
    assert "must be at most count (3)" in msg
    spec = from_json(JobSpec, json.dumps(job_json(kind="batch", count=3, min_count=2)))
    assert spec.least_count == 2


def test_on_full_defaults_by_kind() -> None:
    batch = from_json(JobSpec, json.dumps(job_json(kind="batch")))
    service = from_json(JobSpec, json.dumps(job_json()))
    assert (batch.full_action, service.full_action) == (OnFull.QUEUE, OnFull.REJECT)
    rejecting = from_json(JobSpec, json.dumps(job_json(kind="batch", on_full="reject")))
    assert rejecting.full_action is OnFull.REJECT
    assert "'queue' or 'reject'" in error_at(job_errors(job_json(on_full="wait")), ("on_full",))


def test_start_deadline_is_the_deadline_less_the_expected_duration() -> None:
    spec = from_json(
        JobSpec,
        json.dumps(
            job_json(kind="batch", deadline="2030-01-01T01:00:00Z", expected_duration_s=600)
        ),
    )
    assert spec.start_deadline == datetime(2030, 1, 1, 0, 50, tzinfo=UTC)
    no_duration = job_json(kind="batch", deadline="2030-01-01T01:00:00Z")
    without = from_json(JobSpec, json.dumps(no_duration))
    assert without.start_deadline == without.deadline
    assert from_json(JobSpec, json.dumps(job_json(kind="batch"))).start_deadline is None


def _machine(**overrides: Any) -> str:
    machine: dict[str, Any] = {
        "id": "m-1",
        "hostname": "m-1.dc1.example.com",
        "topology": {"region": "r1", "dc": "dc1", "msb": "msb1", "rack": "rack1"},
        "hardware_type": "t1",
        "capacity": {"cpu": 32000},
    }
    machine.update(overrides)
    return json.dumps(machine)


def test_machine_attribute_limits() -> None:
    errs = errors(lambda: from_json(Machine, _machine(attributes={"os": "x" * 257})))
    assert "at most 256 characters" in error_at(errs, ("attributes", "os"))
    errs = errors(lambda: from_json(Machine, _machine(attributes={"OS": "linux"})))
    assert "a-z, 0-9" in error_at(errs, ("attributes", "OS", "[key]"))


def test_machine_hostname_bounds_and_state() -> None:
    assert "at least 1 character" in error_at(
        errors(lambda: from_json(Machine, _machine(hostname=""))), ("hostname",)
    )
    assert "'up', 'draining', 'maintenance', 'down' or 'decommissioned'" in error_at(
        errors(lambda: from_json(Machine, _machine(state="broken"))), ("state",)
    )


def test_running_task_must_name_its_machine() -> None:
    task = {
        "job": "team-a/web",
        "index": 0,
        "generation": 1,
        "state": "running",
        "version": "1.0",
        "updated_at": "2030-01-01T00:00:00Z",
    }
    errs = errors(lambda: from_json(Task, json.dumps(task)))
    assert "'running' must name its machine" in error_at(errs, ())
    placed = from_json(Task, json.dumps(task | {"machine": "m-1"}))
    assert placed.state is TaskState.RUNNING
    assert from_json(Task, json.dumps(task | {"state": "pending"})).machine is None


def test_advance_notice_needs_machines_and_a_positive_duration() -> None:
    notice = {
        "id": "n-1",
        "machines": [],
        "start": "2030-01-01T00:00:00Z",
        "duration_s": 0,
        "kind": "reboot",
    }
    errs = errors(lambda: from_json(AdvanceNotice, json.dumps(notice)))
    assert [e["loc"] for e in errs] == [("machines",), ("duration_s",)]
    assert "at least 1 item" in errs[0]["msg"]
    assert "greater than 0" in errs[1]["msg"]


REALISTIC_JOB = """
name: feed-ranker
entitlement: ads-ranking
count: 240
kind: service
priority: 300
task:
  package: feed-ranker
  version: 2024.06.1+build.17
  command: /usr/local/bin/feed-ranker
  args: ["--port", "8080", "--model", "/models/current"]
  env:
    LOG_LEVEL: info
    OMP_NUM_THREADS: "8"
  resources:
    cpu: 8000
    memory_mib: 32768
    disk_gib: 50
    gpus: 1
    extra:
      nic-100g: 1
  restart:
    mode: on-failure
    max_restarts: 5
    backoff_initial_s: 2
    backoff_max_s: 120.5
placement:
  hardware_types: [t7-gpu, t8-gpu]
  datacenters: [dc1, dc3]
  constraints:
    - {attribute: kernel.major, op: ">=", value: "6"}
    - {attribute: rack-role, op: not_in, values: [storage, network]}
    - {attribute: has-infiniband, op: exists}
  preferences:
    - {attribute: cpu.vendor, op: "==", value: amd, weight: 10}
    - {attribute: dc, op: in, values: [dc1], weight: 3}
  spread: {level: rack, max_skew: 2}
  affinities:
    - {job: ads-ranking/feature-cache, level: rack}
    - {job: ads-ranking/feed-ranker-canary, level: machine, anti: true}
update:
  max_unavailable_percent: 5
"""


@pytest.mark.usefixtures("default_task_limit")
def test_a_realistic_yaml_job_spec_validates() -> None:
    spec = JobSpec.model_validate_json(json.dumps(yaml.safe_load(REALISTIC_JOB)))
    assert spec.handle == "ads-ranking/feed-ranker"
    assert spec.task.resources.extra == {"nic-100g": 1}
    assert spec.task.restart.backoff_initial_s == 2.0
    assert spec.placement.constraints[0].op is ConstraintOp.GE
    assert [p.weight for p in spec.placement.preferences] == [10, 3]
    assert spec.placement.spread.max_skew == 2
    assert spec.placement.affinities[1].anti is True
    assert spec.update.max_unavailable_percent == 5


@pytest.mark.parametrize("deadline", ["9999-12-31T23:59:59-10:00", "0001-01-01T00:00:00+10:00"])
def test_a_deadline_is_a_date_in_utc_too(deadline: str) -> None:
    # Its UTC form (and the queue's start deadline before it) would be no date at all.
    spec = job_json(kind="batch", deadline=deadline)
    assert "years 1000 to 8999" in error_at(job_errors(spec), ("deadline",))
