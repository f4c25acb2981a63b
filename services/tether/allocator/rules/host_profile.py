"""Among free-pool machines, those already carrying the entitlement's host profile: they need
no switch. (The entitlement's own machines are switched to it anyway.)"""

from __future__ import annotations

import numpy as np

from tether.allocator.index import NONE
from tether.allocator.rules.base import Fact, Plan, Reads, Scorer
from tether.allocator.rules.checks import I64, Rows


class HostProfile(Scorer):
    reads = Reads(entitlement=("host_profile",), machine=frozenset({Fact.PROFILE}))
    pool_only = True

    def parts(self, plan: Plan) -> list[tuple[str, int]]:
        return [(f"host profile {plan.entitlement.host_profile}", 1)]

    def score(self, plan: Plan, rows: Rows) -> I64:
        profile = plan.index.profiles.find(plan.entitlement.host_profile)
        if profile == NONE:
            return np.zeros(len(rows), np.int64)
        carries: I64 = (plan.index.profile[rows] == profile).astype(np.int64)
        return carries

    def ranks(self, plan: Plan) -> bool:
        return plan.index.profiles.find(plan.entitlement.host_profile) != NONE
