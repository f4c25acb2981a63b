"""Only datacenters both the entitlement and the job allow."""

from __future__ import annotations

from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import Check, listed, member_of


def allowed_datacenters(plan: Plan) -> set[str] | None:
    """The datacenters both the entitlement and the job allow (None: any)."""
    limits = [
        set(dcs)
        for dcs in (plan.entitlement.allowed_dcs, plan.job.spec.placement.datacenters)
        if dcs
    ]
    return set.intersection(*limits) if limits else None


class Datacenter(Filter):
    reads = Reads(
        job=("placement.datacenters",),
        entitlement=("allowed_dcs",),
        machine=frozenset({Fact.TOPOLOGY}),
    )

    def checks(self, plan: Plan) -> list[Check]:
        allowed = allowed_datacenters(plan)
        if allowed is None:
            return []
        index = plan.index
        allowed_by = [
            (f"entitlement {plan.entitlement.name}", plan.entitlement.allowed_dcs),
            (f"job {plan.job.handle}", plan.job.spec.placement.datacenters),
        ]
        limits = [(who, dcs) for who, dcs in allowed_by if dcs]
        # code(), not find(): a datacenter seen later must get the code the check holds.
        codes = [index.dcs.code(dc) for dc in allowed]
        return [
            Check(
                "datacenter",
                "datacenter not allowed",
                lambda rows: member_of(index.dc[rows], codes),
                lambda *_: "; ".join(f"{who} allows {listed(dcs)}" for who, dcs in limits),
            )
        ]

    def prune_msbs(self, plan: Plan, msbs: list[int]) -> list[int]:
        allowed = allowed_datacenters(plan)
        if allowed is None:
            return msbs
        codes = {plan.index.dcs.code(dc) for dc in allowed}
        return [msb for msb in msbs if plan.index.msb_dc[msb] in codes]
