"""The allocator's columnar index (`index.AllocationIndex`) and the parts it is made of."""

from tether.allocator.index.codes import ABSENT, DECOMMISSIONED, NONE, STATE_CODES, UP
from tether.allocator.index.columns import BASE_DIMENSIONS
from tether.allocator.index.feed import sinks
from tether.allocator.index.index import AllocationIndex, Snapshot
from tether.allocator.index.ownership import IndexListener
from tether.allocator.index.records import FREE, Header
from tether.allocator.index.tasks import tasks_by_row

__all__ = [
    "ABSENT",
    "BASE_DIMENSIONS",
    "DECOMMISSIONED",
    "FREE",
    "NONE",
    "STATE_CODES",
    "UP",
    "AllocationIndex",
    "Header",
    "IndexListener",
    "Snapshot",
    "sinks",
    "tasks_by_row",
]
