"""Records and polling helpers shared by the scheduler's integration tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

from tether.model import (
    Job,
    JobSpec,
    Machine,
    MachineState,
    Resources,
    RestartPolicy,
    TaskTemplate,
    TetherModel,
    Topology,
    from_json,
    to_json,
)
from tether.model.admission import Admission
from tether.store import Store, keys

TASK_CPU = 100
"""Millicores each task of `make_job` takes."""

M = TypeVar("M", bound=TetherModel)
T = TypeVar("T")


def make_machine(machine_id: str, state: MachineState = MachineState.UP) -> Machine:
    return Machine(
        id=machine_id,
        hostname=f"{machine_id}.local",
        topology=Topology(region="r", dc="dc1", msb="msb1", rack="rack1"),
        hardware_type="std",
        capacity=Resources(cpu=4000, memory_mib=4096),
        state=state,
    )


def make_job(
    entitlement: str,
    name: str,
    count: int,
    *,
    generation: int = 1,
    deleting: bool = False,
    backoff_initial_s: float = 0.3,
) -> Job:
    template = TaskTemplate(
        package="web",
        version="1.0",
        command="sleep",
        args=["1000"],
        resources=Resources(cpu=TASK_CPU, memory_mib=64),
        restart=RestartPolicy(backoff_initial_s=backoff_initial_s, backoff_max_s=2.0),
    )
    now = datetime.now(UTC)
    spec = JobSpec(name=name, entitlement=entitlement, count=count, task=template)
    return Job(spec=spec, generation=generation, created_at=now, updated_at=now, deleting=deleting)


async def put(store: Store, key: str, record: TetherModel) -> int:
    return await store.put(key, to_json(record))


async def read(store: Store, key: str, model: type[M]) -> M | None:
    kv = await store.get(key)
    return None if kv is None else from_json(model, kv.value, stored=True)


async def submit(store: Store, job: Job) -> None:
    """What the frontend writes for a new job: its admission record, queued, and the job."""
    spec = job.spec
    await put(
        store, keys.admission(spec.entitlement, spec.name), Admission.of(spec, job.created_at)
    )
    await put(store, keys.job(spec.entitlement, spec.name), job)
