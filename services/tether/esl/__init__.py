"""Tether's scheduling library (ESCHER's ESLs): placement policies written as a few calls of
`TetherClient.set_resource`, the one primitive of ephemeral resources.

Each policy sets a label of the entitlement on the machines it chooses and returns what the
job's tasks must ask for in `resources.extra`; the allocator then places them only where the
label has room. docs/esl.md shows each with an example.
"""

from tether.esl.policies import (
    anti_affinity,
    bin_pack,
    colocate,
    gang,
    load_balance,
    soft_constraint,
)
from tether.esl.room import reachable, tasks_that_fit

__all__ = [
    "anti_affinity",
    "bin_pack",
    "colocate",
    "gang",
    "load_balance",
    "reachable",
    "soft_constraint",
    "tasks_that_fit",
]
