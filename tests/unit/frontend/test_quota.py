"""Quota arithmetic: count x resources, totals over jobs, and shortfalls against a quota."""

from __future__ import annotations

from typing import Any

from tether.frontend.quota import demand, quota_shortfall, total_demand
from tether.model import MAX_QUANTITY, ZERO, JobSpec, Resources

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


def test_jobs_that_fit_have_no_shortfall() -> None:
    quota = Resources(cpu=2000, memory_mib=1024)
    assert quota_shortfall(quota, [spec("a", 2, cpu=1000, memory_mib=512)]) == []


def test_shortfall_names_each_short_dimension() -> None:
    quota = Resources(cpu=2000, memory_mib=1024)
    jobs = [spec("a", 2, cpu=1000, memory_mib=256), spec("b", 1, cpu=500, memory_mib=1024)]
    assert quota_shortfall(quota, jobs) == [
        "cpu: need 2500 millicores, 2000 free",
        "memory: need 1536 MiB, 1024 free",
    ]


def test_a_dimension_the_quota_lacks_is_short() -> None:
    assert quota_shortfall(Resources(cpu=10), [spec("a", 1, extra={"fpga": 1})]) == [
        "extra/fpga: need 1, 0 free"
    ]


def test_an_overflowing_total_is_short_rather_than_an_error() -> None:
    jobs = [spec("a", 2, cpu=MAX_QUANTITY // 2 + 1)]
    assert quota_shortfall(Resources(cpu=MAX_QUANTITY), jobs) == ["cpu: beyond any quota"]
