"""Ephemeral resources (ESCHER): labels an entitlement sets on machines for its own tasks.

`set_resource(label, capacity, node_spec)` gives every machine that `node_spec` matches
`capacity` of the label; tasks of the entitlement then ask for it in `resources.extra` like any
resource, and the allocator places them only where enough of it is free. Gang scheduling,
co-location, anti-affinity and the rest are patterns over this one primitive (`tether.esl`).

One record per (entitlement, label), `resources/<entitlement>/<label>`, holds the label's
grants: on a machine, the grant naming that machine wins; else the last of the attribute and
catch-all grants that matches it; else the machine has none of the label.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import AfterValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from tether.model.base import Name, Quantity, TetherModel, Timestamp
from tether.model.placement import Constraint

BUILT_IN_DIMENSIONS: Final = frozenset({"cpu", "memory", "disk", "gpus"})
"""Labels an ephemeral resource may not take: the resource dimensions every machine has."""

MAX_GRANTS: Final = 1024
"""Grants one label may hold: a label set on more machines names them by attributes."""


def _not_built_in(label: str) -> str:
    if label in BUILT_IN_DIMENSIONS:
        raise PydanticCustomError(
            "built_in_dimension",
            "label '{label}' is a built-in resource dimension; pick another",
            {"label": label},
        )
    return label


Label = Annotated[
    Name,
    AfterValidator(_not_built_in),
    Field(json_schema_extra={"not": {"enum": sorted(BUILT_IN_DIMENSIONS)}}),
]
"""An ephemeral resource's label: what its tasks ask for in `resources.extra`."""


def _one_kind_schema(schema: dict[str, Any]) -> None:
    # What _one_kind checks: with a machine, no constraints.
    schema["if"] = {"required": ["machine"], "properties": {"machine": {"type": "string"}}}
    schema["then"] = {"properties": {"constraints": {"maxItems": 0}}}


class NodeSpec(TetherModel):
    """Which machines a grant covers: one machine by id, the machines whose attributes meet
    every constraint, or (neither given) every machine the entitlement reaches."""

    model_config = ConfigDict(json_schema_extra=_one_kind_schema)

    machine: Name | None = Field(default=None, description="One machine, by id.")
    constraints: list[Constraint] = Field(
        default_factory=list,
        description="Attribute predicates, as in a job's placement constraints.",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> NodeSpec:
        if self.machine is not None and self.constraints:
            raise PydanticCustomError(
                "machine_and_constraints",
                "a node_spec names one machine or attribute constraints, not both",
                {},
            )
        return self


class ResourceGrant(TetherModel):
    """`capacity` of the label on each machine `node_spec` covers."""

    node_spec: NodeSpec
    capacity: Quantity


class EphemeralResource(TetherModel):
    """An entitlement's ephemeral resource: its label, where it is and how much, and what ends
    it (its owner job's deletion, or its expiry)."""

    entitlement: Name
    label: Label = Field(description="What tasks ask for in resources.extra.")
    grants: list[ResourceGrant] = Field(max_length=MAX_GRANTS)
    owner_job: Name | None = Field(
        default=None,
        description="A job of the entitlement: the resource goes when the job does.",
    )
    expires_at: Timestamp | None = Field(
        default=None, description="When the resource goes by itself (none: when deleted)."
    )
    created_at: Timestamp
    updated_at: Timestamp

    def with_grant(self, grant: ResourceGrant, now: datetime) -> EphemeralResource:
        """This resource with `grant` set: it replaces the grant of the same node_spec, or
        comes last (so it wins over the catch-all and attribute grants before it)."""
        kept = [old for old in self.grants if old.node_spec != grant.node_spec]
        # Built anew, not copied: the number of grants is checked again.
        return EphemeralResource(**{**dict(self), "grants": [*kept, grant], "updated_at": now})

    def machine_grants(self) -> dict[str, int]:
        """Machine id -> capacity of the grants naming one machine."""
        return {
            grant.node_spec.machine: grant.capacity
            for grant in self.grants
            if grant.node_spec.machine is not None
        }

    def broad_grants(self) -> list[ResourceGrant]:
        """The attribute and catch-all grants, in order (the last matching one wins)."""
        return [grant for grant in self.grants if grant.node_spec.machine is None]

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now
