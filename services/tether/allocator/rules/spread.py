"""Spread: a scorer of fault domains with state. It keeps count of the job's tasks in each
domain of the job's level and ranks domains in bands of max_skew, so that no domain gets more
than max_skew tasks ahead of the least loaded one that still has room."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from tether.allocator.rules.base import Fact, Plan, Reads
from tether.allocator.rules.checks import Rows
from tether.model import FaultDomain


class Spread:
    """The job's tasks per domain of its spread level, as the plan goes on."""

    reads = Reads(job=("placement.spread",), machine=frozenset({Fact.TOPOLOGY}))

    def __init__(self, plan: Plan, placed: Iterable[int]) -> None:
        spread = plan.job.spec.placement.spread
        self.index = plan.index
        self.level = spread.level
        self.skew = spread.max_skew
        self.column: npt.NDArray[np.int32] = {
            FaultDomain.DC: self.index.dc,
            FaultDomain.MSB: self.index.msb,
            FaultDomain.RACK: self.index.rack,
        }[self.level]
        self.counts = Counter(int(self.column[row]) for row in placed)
        """Domain code -> the job's tasks there (placed before the plan and planned)."""

    def band(self, count: int) -> int:
        """Domains in a lower band go first: every domain stays within max_skew of the least
        loaded one."""
        return count // self.skew

    @property
    def by_machine(self) -> bool:
        """Whether domains are racks: too many to sample machines from, and every empty rack is
        as good as another."""
        return self.level is FaultDomain.RACK

    def domains_at_level(self) -> int:
        index = self.index
        return len((index.msbs if self.level is FaultDomain.MSB else index.dcs).names)

    def pool_domains(self, msbs: list[int], tasks: int) -> dict[int, list[int]]:
        """The MSBs of free-pool machines by the domain they belong to (for racks, enough
        racks for `tasks` tasks)."""
        index = self.index
        by_domain: dict[int, list[int]] = {}
        match self.level:
            case FaultDomain.DC:
                for msb in msbs:
                    by_domain.setdefault(index.msb_dc[msb], []).append(msb)
            case FaultDomain.MSB:
                by_domain = {msb: [msb] for msb in msbs}
            case FaultDomain.RACK:
                # Every empty rack is as good as another: offer enough of them, taken in turn
                # from each MSB so that the racks are spread too.
                wanted = max(2 * tasks, 64)
                racks = (index.msb_racks.get(msb, []) for msb in msbs)
                for rack in itertools.islice(_round_robin(racks), wanted):
                    by_domain[rack] = [index.rack_msb[rack]]
        return by_domain

    def in_domain(self, rows: Rows, code: int) -> Rows:
        """Those of an MSB's `rows` in domain `code` (an MSB's rows are all in its MSB and
        datacenter, not all in one of its racks)."""
        return rows[self.index.rack[rows] == code] if self.by_machine else rows


def _round_robin(lists: Iterator[list[int]]) -> Iterator[int]:
    """The first of each list, then the second of each, and so on."""
    for layer in itertools.zip_longest(*lists):
        yield from (item for item in layer if item is not None)
