"""The job's attribute constraints, one check each."""

from __future__ import annotations

from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import Check, Mask, Rows
from tether.allocator.rules.predicates import matches, predicate_text
from tether.model import Constraint


class Constraints(Filter):
    reads = Reads(job=("placement.constraints",), machine=frozenset({Fact.ATTRIBUTES}))

    def checks(self, plan: Plan) -> list[Check]:
        return [_check(plan, constraint) for constraint in plan.job.spec.placement.constraints]


def _check(plan: Plan, constraint: Constraint) -> Check:
    text = predicate_text(constraint)

    def accepts(rows: Rows) -> Mask:
        return matches(plan.index, constraint, rows)

    return Check(f"constraint {text}", f"fails constraint {text}", accepts)
