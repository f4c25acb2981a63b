"""Ephemeral resource views: a label with its machines' capacity and what is free, the list of
them (the cluster state), and the body of POST /v1/resources."""

from __future__ import annotations

from typing import Final

from pydantic import Field

from tether.frontend.schemas import View
from tether.model import Name, PositiveSeconds, Quantity, TetherModel
from tether.model.ephemeral import EphemeralResource, Label, NodeSpec

MAX_TTL_S: Final = 10 * 366 * 24 * 3600
"""Ten years: a label meant to outlast that has no `ttl_s` (and an expiry must be a date)."""


class SetResourceRequest(TetherModel):
    """The body of POST /v1/resources: ESCHER's `set_resource(label, capacity, node_spec)`."""

    entitlement: Name = Field(description="Whose label it is: only its tasks see and use it.")
    label: Label
    capacity: Quantity = Field(description="How much of the label each matching machine has.")
    node_spec: NodeSpec = Field(
        default_factory=NodeSpec,
        description='{"machine": id} (a machine of the region: 422 otherwise), {"constraints": '
        "[...]} or {} for every machine the entitlement reaches. Each node_spec is a grant of "
        "the label: at most 1,024 of them (422 past that).",
    )
    owner_job: Name | None = Field(
        default=None,
        description="A job of the entitlement (422 otherwise): the label goes when the job does "
        "(kept when not given on a later call).",
    )
    ttl_s: PositiveSeconds | None = Field(
        default=None,
        le=MAX_TTL_S,
        description="The label goes this long from now (kept when not given on a later call).",
    )


class MachineShareView(View):
    machine: str
    capacity: int
    """What the label's grants give the machine."""
    held: int
    """What the entitlement's running tasks hold of it there."""
    free: int
    """Capacity less held (0 when a lowering left the tasks holding more)."""


class ResourceView(View):
    """A label's record and its machines: those with capacity or something held, for grants
    by attributes or for every machine those the entitlement reaches (its own machines and
    the free pool's)."""

    resource: EphemeralResource
    machines: list[MachineShareView]
    machines_truncated: bool = False
    """More machines than `limit` matched."""


class ResourceList(View):
    """The cluster state of the ephemeral resources the principal may see."""

    resources: list[ResourceView]
