"""Only machines that are up take tasks."""

from __future__ import annotations

from collections import Counter

from tether.allocator.index import ABSENT, STATE_CODES, UP
from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import Check

_STATE_NAMES = {code: state.value for state, code in STATE_CODES.items()} | {ABSENT: "deleted"}


class StateUp(Filter):
    reads = Reads(machine=frozenset({Fact.STATE}))

    def checks(self, plan: Plan) -> list[Check]:
        index = plan.index
        return [
            Check(
                "state up",
                "not up",
                lambda rows: index.state[rows] == UP,
                lambda _, rejected: ", ".join(
                    f"{count} {_STATE_NAMES[int(state)]}"
                    for state, count in sorted(Counter(index.state[rejected].tolist()).items())
                ),
            )
        ]
