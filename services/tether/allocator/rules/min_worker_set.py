"""Min-Worker-Set, for jobs that ask (`placement.min_worker_set`): machines already running the
job's tasks rank first, so a service that scales up starts its new tasks where it runs already
(few cold starts) and keeps to as few machines as hold it."""

from __future__ import annotations

import numpy as np

from tether.allocator.rules.base import Fact, Plan, Reads, Scorer
from tether.allocator.rules.checks import I64, Rows


class MinWorkerSet(Scorer):
    reads = Reads(job=("placement.min_worker_set",), machine=frozenset({Fact.PLACEMENTS}))

    def parts(self, plan: Plan) -> list[tuple[str, int]]:
        return [("runs the job's tasks already (min worker set)", 1)]

    def bits(self, plan: Plan) -> int:
        return 1 if plan.job.spec.placement.min_worker_set else 0

    def score(self, plan: Plan, rows: Rows) -> I64:
        holding = np.fromiter(plan.index.held(plan.job.handle).values(), np.intp)
        runs: I64 = np.isin(rows, holding).astype(np.int64)
        return runs

    def ranks(self, plan: Plan) -> bool:
        return False  # free-pool machines hold no task of any job: all alike to it
