"""The region's fault domains as codes: datacenters, MSBs and racks, and which holds which."""

from __future__ import annotations

from tether.allocator.index.codes import Codes


class Topology:
    """Datacenter, MSB and rack codes; an MSB's name is "<dc>/<msb>", a rack's "<dc>/<msb>/<rack>",
    so that equal names in two datacenters are two domains."""

    def __init__(self) -> None:
        self.dcs, self.msbs, self.racks = Codes(), Codes(), Codes()
        self.msb_dc: list[int] = []
        """The datacenter of each MSB code."""
        self.rack_msb: list[int] = []
        """The MSB of each rack code."""
        self.msb_racks: dict[int, list[int]] = {}
        """The racks of each MSB."""

    def codes(self, dc: str, msb: str, rack: str) -> tuple[int, int, int]:
        """The codes of a machine's datacenter, MSB and rack, assigned now if new."""
        dc_code = self.dcs.code(dc)
        msb_code = self.msbs.code(f"{dc}/{msb}")
        if msb_code == len(self.msb_dc):
            self.msb_dc.append(dc_code)
        rack_code = self.racks.code(f"{dc}/{msb}/{rack}")
        if rack_code == len(self.rack_msb):
            self.rack_msb.append(msb_code)
            self.msb_racks.setdefault(msb_code, []).append(rack_code)
        return dc_code, msb_code, rack_code
