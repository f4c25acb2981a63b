"""Only the hardware types the job names, if it names any."""

from __future__ import annotations

from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import Check, listed, member_of


class HardwareType(Filter):
    reads = Reads(job=("placement.hardware_types",), machine=frozenset({Fact.HARDWARE}))

    def checks(self, plan: Plan) -> list[Check]:
        names = plan.job.spec.placement.hardware_types
        if not names:
            return []
        index = plan.index
        codes = [index.hardware.code(name) for name in names]
        return [
            Check(
                "hardware type",
                "hardware type not allowed",
                lambda rows: member_of(index.hw[rows], codes),
                lambda *_: f"allowed: {listed(names)}",
            )
        ]
