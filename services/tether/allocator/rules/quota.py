"""The entitlement's limits on a plan as a whole: its resource quota (how many more tasks) and
its machine quota (how many more machines of each hardware type may join it)."""

from __future__ import annotations

import numpy as np

from tether.allocator.rules.base import Plan
from tether.allocator.rules.checks import Check
from tether.model.resources import quantity_text


def quota_text(plan: Plan, chosen: int) -> str | None:
    """Why one more task does not fit the entitlement's resource quota on top of its usage and
    `chosen` tasks of the request already planned, or None."""
    index, need, quota, entitlement = plan.index, plan.need, plan.quota, plan.entitlement
    usage = index.usage_of(entitlement.name) + need * chosen
    over = [
        f"{label}: {quantity_text(label, int(need[column]))} more, "
        f"{quantity_text(label, int(usage[column]))} of "
        f"{quantity_text(label, int(quota[column]))} in use"
        for column, label in enumerate(index.dimensions)
        if need[column] and usage[column] + need[column] > quota[column]
    ]
    if not over:
        return None
    return f"entitlement {entitlement.name} quota exceeded: {'; '.join(over)}"


def quota_room(plan: Plan) -> int:
    """How many more tasks the entitlement's resource quota allows."""
    usage = plan.index.usage_of(plan.entitlement.name).tolist()
    needed = [
        (amount, quota, used)
        for amount, quota, used in zip(plan.need.tolist(), plan.quota.tolist(), usage, strict=True)
        if amount > 0
    ]
    if not needed:
        return 1 << 40
    # A few dimensions: Python integers beat numpy's per-call cost here.
    return int(min(max(quota - used, 0) // amount for amount, quota, used in needed))


def quota_check(plan: Plan) -> Check:
    """The resource quota as Explain reports it: every machine or none."""
    shortfall = quota_text(plan, 0)
    return Check(
        "quota",
        "entitlement quota exceeded",
        lambda rows: np.full(len(rows), shortfall is None),
        lambda *_: shortfall or "",
    )


def machines_left(plan: Plan) -> dict[int, int] | None:
    """Hardware type code -> how many more machines of it may join the entitlement (None: no
    machine quota)."""
    limits = plan.entitlement.quota.machines
    if not limits:
        return None
    index = plan.index
    owned = index.owned_hardware(plan.owner)
    return {
        index.hardware.code(name): count - owned.get(index.hardware.code(name), 0)
        for name, count in limits.items()
    }
