"""The shape of the generated descriptors: enum zero values, service names, field numbering."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor, descriptor_pb2, message
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tether.model import MaintenanceKind
from tether.proto.allocator.v1 import allocator_pb2
from tether.proto.taskcontrol.v1 import taskcontrol_pb2

ROOT = Path(__file__).resolve().parents[3]
MODULES: list[ModuleType] = [taskcontrol_pb2, allocator_pb2]


def _upper_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def _messages(file: descriptor.FileDescriptor) -> Iterator[descriptor.Descriptor]:
    pending = list(file.message_types_by_name.values())
    while pending:
        msg = pending.pop()
        yield msg
        pending.extend(msg.nested_types)


def _enums(file: descriptor.FileDescriptor) -> Iterator[descriptor.EnumDescriptor]:
    yield from file.enum_types_by_name.values()
    for msg in _messages(file):
        yield from msg.enum_types


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_proto_package_and_path(module: ModuleType) -> None:
    area = module.__name__.split(".")[2]
    assert module.DESCRIPTOR.package == f"tether.{area}.v1"
    assert module.DESCRIPTOR.name == f"tether/proto/{area}/v1/{area}.proto"
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    assert proto.syntax == "proto3"
    # Each area's file is self-contained: it may import only well-known types.
    assert all(dep.startswith("google/protobuf/") for dep in proto.dependency)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_enum_starts_with_unspecified(module: ModuleType) -> None:
    enums = list(_enums(module.DESCRIPTOR))
    for enum in enums:
        prefix = _upper_snake(enum.name)
        assert enum.values_by_number[0].name == f"{prefix}_UNSPECIFIED", enum.full_name
        for value in enum.values:
            assert value.name.startswith(f"{prefix}_"), value.name
    if module is taskcontrol_pb2:
        assert {e.name for e in enums} == {
            "OperationKind",
            "OperationState",
            "TaskState",
            "MaintenanceKind",
        }


def test_every_maintenance_kind_has_its_proto_value() -> None:
    # Controllers hear of drains and decommissions too, so every kind needs a wire value.
    wire = set(taskcontrol_pb2.MaintenanceKind.keys()) - {"MAINTENANCE_KIND_UNSPECIFIED"}
    assert wire == {f"MAINTENANCE_KIND_{kind.name}" for kind in MaintenanceKind}


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_field_numbers_are_sequential(module: ModuleType) -> None:
    for msg in _messages(module.DESCRIPTOR):
        numbers = [field.number for field in msg.fields]
        assert numbers == list(range(1, len(numbers) + 1)), msg.full_name


SERVICES = {
    (taskcontrol_pb2, "tether.taskcontrol.v1.TaskController"): {
        "Process": ("TaskControlRequest", "TaskControlResponse"),
    },
    (taskcontrol_pb2, "tether.taskcontrol.v1.TaskControllerRegistry"): {
        "Register": ("RegisterRequest", "RegisterResponse"),
        "Renew": ("RenewRequest", "RenewResponse"),
        "Unregister": ("UnregisterRequest", "UnregisterResponse"),
        "List": ("ListRequest", "ListResponse"),
    },
    (allocator_pb2, "tether.allocator.v1.Allocator"): {
        "Place": ("PlaceRequest", "PlaceResponse"),
        "Release": ("ReleaseRequest", "ReleaseResponse"),
        "Explain": ("ExplainRequest", "ExplainResponse"),
        "CheckPreemption": ("CheckPreemptionRequest", "CheckPreemptionResponse"),
        "EphemeralState": ("EphemeralStateRequest", "EphemeralStateResponse"),
        "Suggest": ("SuggestRequest", "SuggestResponse"),
    },
}


def test_services_and_methods() -> None:
    for module in MODULES:
        expected = {name for mod, name in SERVICES if mod is module}
        found = {s.full_name for s in module.DESCRIPTOR.services_by_name.values()}
        assert found == expected
    for (module, full_name), methods in SERVICES.items():
        service = module.DESCRIPTOR.services_by_name[full_name.rsplit(".", 1)[1]]
        assert service.full_name == full_name
        signatures = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
        assert signatures == methods, full_name


def _assert_every_field_set(msg: message.Message) -> None:
    """Fails unless every field of msg (and of the messages in it) holds a non-default value."""
    desc = msg.DESCRIPTOR
    for field in desc.fields:
        if field.containing_oneof is not None:
            continue
        value = getattr(msg, field.name)
        if field.is_repeated:
            assert len(value) > 0, f"{desc.full_name}.{field.name} is empty"
            items = value if field.message_type is not None else []
        elif field.message_type is not None:
            assert msg.HasField(field.name), f"{desc.full_name}.{field.name} is unset"
            items = [value]
        else:
            assert value != field.default_value, f"{desc.full_name}.{field.name} is default"
            items = []
        for item in items:
            _assert_every_field_set(item)
    for oneof in desc.oneofs:
        assert msg.WhichOneof(oneof.name) is not None, f"{desc.full_name}.{oneof.name} unset"


def _task(index: int) -> taskcontrol_pb2.TaskRef:
    return taskcontrol_pb2.TaskRef(
        job_handle="ads/frontend", index=index, task_id=f"t-{index}", machine_id=f"m-{index}"
    )


def _full_request() -> taskcontrol_pb2.TaskControlRequest:
    tc = taskcontrol_pb2
    when = Timestamp(seconds=1_750_000_000, nanos=123_000_000)
    operation = tc.TaskOperation(
        id="op-1",
        kind=tc.OPERATION_KIND_MOVE,
        tasks=[_task(1), _task(2)],
        reason="machine m-0 goes into maintenance",
        state=tc.OPERATION_STATE_PENDING_APPROVAL,
        created_at=when,
        deadline=Timestamp(seconds=1_750_003_600, nanos=1),
        target_version="42",
        target_machine="m-9",
    )
    done = tc.TaskOperation()
    done.CopyFrom(operation)
    done.id = "op-0"
    done.state = tc.OPERATION_STATE_DONE
    return tc.TaskControlRequest(
        job_handle="ads/frontend",
        sequence_number=2**40 + 7,
        pending_operations=[operation],
        completed_operations=[done],
        advance_notices=[
            tc.AdvanceNotice(
                id="mx-1",
                machine_ids=["m-0", "m-1"],
                affected_tasks=[_task(1)],
                start=when,
                duration=Duration(seconds=3600, nanos=5),
                kind=tc.MAINTENANCE_KIND_POWER,
                reason="msb-3 breaker replacement",
            )
        ],
        all_unhealthy_tasks=[
            tc.UnhealthyTask(
                task=_task(3), state=tc.TASK_STATE_LOST, reason="lease expired", since=when
            )
        ],
        task_count=3,
    )


def test_task_control_request_round_trips() -> None:
    request = _full_request()
    _assert_every_field_set(request)
    wire = request.SerializeToString(deterministic=True)
    decoded = taskcontrol_pb2.TaskControlRequest.FromString(wire)
    assert decoded == request
    _assert_every_field_set(decoded)
    assert decoded.SerializeToString(deterministic=True) == wire


def test_registration_scope_is_a_oneof() -> None:
    request = taskcontrol_pb2.RegisterRequest(job_handle="ads/frontend", endpoint="h:1")
    assert request.WhichOneof("scope") == "job_handle"
    request.entitlement = "ads"
    assert request.WhichOneof("scope") == "entitlement"
    assert request.job_handle == ""
    decoded = taskcontrol_pb2.RegisterRequest.FromString(request.SerializeToString())
    assert decoded.WhichOneof("scope") == "entitlement"


_DECLARATION = re.compile(
    r"^\s*(message|enum|service|rpc|oneof)\s"  # named blocks
    r"|^\s*((repeated|optional)\s+)?(map\s*<[^>]*>|[\w.]+)\s+\w+\s*=\s*\d+"  # fields
    r"|^\s*[A-Z][A-Z0-9_]*\s*=\s*\d+\s*;"  # enum values
)


@pytest.mark.parametrize("proto", sorted((ROOT / "protos").rglob("*.proto")), ids=str)
def test_every_declaration_is_commented(proto: Path) -> None:
    undocumented = []
    previous = ""
    for number, line in enumerate(proto.read_text().splitlines(), start=1):
        if _DECLARATION.match(line) and not previous.startswith("//"):
            undocumented.append(f"{number}: {line.strip()}")
        if line.strip():
            previous = line.strip()
    assert not undocumented, "declarations without a comment:\n" + "\n".join(undocumented)
