"""The Gavel policies by name, written by hand: one line a policy."""

from __future__ import annotations

from collections.abc import Callable

from tether.taskcontrol.appsched.gavel.policies import (
    fifo,
    finish_time_fairness,
    hierarchical,
    max_min_fairness,
    max_sum_throughput,
    min_total_duration,
)
from tether.taskcontrol.appsched.gavel.problem import Allocation, Problem

Policy = Callable[[Problem], Allocation]

POLICIES: dict[str, Policy] = {
    "fifo": fifo.agnostic,
    "fifo_perf": fifo.heterogeneity_aware,
    "finish_time_fairness": finish_time_fairness.agnostic,
    "finish_time_fairness_perf": finish_time_fairness.heterogeneity_aware,
    "hierarchical": hierarchical.hierarchical,
    "max_min_fairness": max_min_fairness.agnostic,
    "max_min_fairness_perf": max_min_fairness.heterogeneity_aware,
    "max_sum_throughput": max_sum_throughput.max_sum_throughput,
    "min_total_duration": min_total_duration.agnostic,
    "min_total_duration_perf": min_total_duration.heterogeneity_aware,
}
