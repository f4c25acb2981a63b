"""Throughput profile views: the stored record itself, the list of them, and the PUT body."""

from __future__ import annotations

from pydantic import Field

from tether.frontend.schemas import View
from tether.model import TetherModel
from tether.model.accelerator import ThroughputProfileRecord, Throughputs


class ThroughputProfileList(View):
    throughput_profiles: list[ThroughputProfileRecord]
    """Of the entitlements the principal belongs to, by entitlement and name."""


class ThroughputProfileBody(TetherModel):
    """The body of PUT /v1/throughput-profiles/{ent}/{name}."""

    throughputs: Throughputs = Field(
        description="{accelerator type: {job type: {scale factor: steps per second}}}, the "
        "format of Gavel's isolated_throughputs.json."
    )
