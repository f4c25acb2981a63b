"""Where a machine sits: region, datacenter, main switchboard (power/fault domain) and rack."""

from __future__ import annotations

import enum

from tether.model.base import Name, TetherModel


class Topology(TetherModel):
    """A machine's position in the region's fault-domain tree."""

    region: Name
    dc: Name
    msb: Name
    rack: Name


class FaultDomain(enum.StrEnum):
    """A level of the topology that tasks can be spread over."""

    DC = "dc"
    MSB = "msb"
    RACK = "rack"

    def of(self, topology: Topology) -> str:
        """The domain at this level that `topology` belongs to, as a path such as "dc1/msb2".

        The path includes the parents because MSB and rack names need only be unique within
        their parent: rack "r1" under two MSBs is two racks.
        """
        match self:
            case FaultDomain.DC:
                return topology.dc
            case FaultDomain.MSB:
                return f"{topology.dc}/{topology.msb}"
            case FaultDomain.RACK:
                return f"{topology.dc}/{topology.msb}/{topology.rack}"
