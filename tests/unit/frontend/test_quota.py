"""Quota arithmetic: count x resources, and totals over jobs."""

from __future__ import annotations

from typing import Any

from tether.frontend.quota import demand, total_demand
from tether.model import ZERO, JobSpec, Resources

TASK: dict[str, Any] = {"package": "p", "version": "1", "command": "run"}


def spec(name: str, count: int, **resources: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": name,
            "entitlement": "team",
            "count": count,
            "task": TASK | {"resources": Resources(**resources)},
        }
    )


def test_demand_is_count_times_task_resources() -> None:
    assert demand(spec("a", 3, cpu=500, memory_mib=128)) == Resources(cpu=1500, memory_mib=384)
    jobs = [spec("a", 3, cpu=500), spec("b", 2, cpu=250, gpus=1)]
    assert total_demand(jobs) == Resources(cpu=2000, gpus=2)
    assert total_demand([]) == ZERO
