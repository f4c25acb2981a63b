"""Where a job's tasks may run: constraints and preferences on machine attributes, spread over
fault domains, affinity to other jobs, gangs."""

from __future__ import annotations

import enum
import re
from typing import Any, Final, Literal, Self

from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from tether.model.base import (
    AttributeKey,
    AttributeValue,
    JobHandle,
    NameList,
    TetherModel,
)
from tether.model.topology import FaultDomain

MAX_PREFERENCES = 32
"""Preference rules a job may list; placement ranks machines by one bit per rule."""


class ConstraintOp(enum.StrEnum):
    """How a machine attribute is compared; `>=` and `<=` compare numerically."""

    EQ = "=="
    NE = "!="
    IN = "in"
    NOT_IN = "not_in"
    EXISTS = "exists"
    GE = ">="
    LE = "<="


NUMBER_PATTERN: Final = (
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)$"
    r"|^[+-]?([0-9]{1,9}(\.[0-9]*)?|\.[0-9]+)[eE](-[0-9]+|\+?([0-9]{1,2}|[12][0-9]{2}))$"
)
"""The value `>=` and `<=` compare: a decimal number such as "64" or "2.5", or one with an
exponent (at most 299) and at most 9 digits before the point, such as "1.5e1". Every such
number is a finite float (a value has at most 256 characters), so the pattern is the whole
rule, in the schema as on the server."""
_NUMBER: Final = re.compile(NUMBER_PATTERN)


def _operands_schema(schema: dict[str, Any]) -> None:
    # What _operands_match_op checks.
    no_value = {"type": "null"}
    no_values = {"maxItems": 0}
    numeric = [ConstraintOp.GE, ConstraintOp.LE]
    schema["if"] = {"properties": {"op": {"enum": [ConstraintOp.IN, ConstraintOp.NOT_IN]}}}
    schema["then"] = {
        "required": ["values"],
        "properties": {"value": no_value, "values": {"minItems": 1}},
    }
    schema["else"] = {
        "if": {"properties": {"op": {"const": ConstraintOp.EXISTS}}},
        "then": {"properties": {"value": no_value, "values": no_values}},
        "else": {
            "required": ["value"],
            "properties": {"value": {"type": "string"}, "values": no_values},
            "if": {"properties": {"op": {"enum": numeric}}},
            "then": {"properties": {"value": {"pattern": NUMBER_PATTERN}}},
        },
    }


class AttributePredicate(TetherModel):
    """A test on one machine attribute; the shared shape of constraints and preferences."""

    model_config = ConfigDict(json_schema_extra=_operands_schema)

    attribute: AttributeKey
    op: ConstraintOp
    value: AttributeValue | None = None
    """The operand of `==`, `!=`, `>=` and `<=`; for `>=` and `<=` a finite number, such as
    "64" or "2.5" (422 otherwise)."""
    values: list[AttributeValue] = Field(default_factory=list)
    """The operands of `in` and `not_in`, at least one."""

    @model_validator(mode="after")
    def _operands_match_op(self) -> Self:
        op = self.op
        if op in (ConstraintOp.IN, ConstraintOp.NOT_IN):
            if not self.values or self.value is not None:
                raise PydanticCustomError(
                    "constraint_operands",
                    "operator '{op}' needs a non-empty 'values' list and no 'value'",
                    {"op": op.value},
                )
        elif op is ConstraintOp.EXISTS:
            if self.value is not None or self.values:
                raise PydanticCustomError(
                    "constraint_operands",
                    "operator 'exists' takes neither 'value' nor 'values'",
                )
        elif self.value is None or self.values:
            raise PydanticCustomError(
                "constraint_operands",
                "operator '{op}' needs a 'value' and no 'values'",
                {"op": op.value},
            )
        elif op in (ConstraintOp.GE, ConstraintOp.LE) and not _is_number(self.value):
            raise PydanticCustomError(
                "constraint_operands",
                "operator '{op}' compares numbers, but 'value' '{value}' is not a number such as "
                "64, 2.5 or 1.5e1",
                {"op": op.value, "value": self.value},
            )
        return self


def _is_number(text: str) -> bool:
    return _NUMBER.fullmatch(text) is not None


class Constraint(AttributePredicate):
    """A hard requirement: machines whose attributes fail it are never chosen."""


class Preference(AttributePredicate):
    """A soft requirement: machines that satisfy it score `weight` more."""

    weight: int = Field(default=1, ge=1)


class Spread(TetherModel):
    """Keep task counts across the domains of `level` within `max_skew` of each other."""

    level: FaultDomain = FaultDomain.MSB
    max_skew: int = Field(default=1, ge=1)


class Affinity(TetherModel):
    """Place tasks on the same machine/rack as another job's tasks, or (anti) never there."""

    job: JobHandle
    level: Literal["machine", "rack"] = "machine"
    anti: bool = False


class Placement(TetherModel):
    """Where a job's tasks may run (hard) and where they had better run (soft)."""

    constraints: list[Constraint] = Field(default_factory=list)
    hardware_types: NameList = Field(default_factory=list)
    """Empty means any hardware type."""
    datacenters: NameList = Field(default_factory=list)
    """Empty means any datacenter the entitlement allows."""
    preferences: list[Preference] = Field(default_factory=list, max_length=MAX_PREFERENCES)
    """In decreasing order of importance: each rule outweighs all later rules together."""
    spread: Spread = Field(default_factory=Spread)
    affinities: list[Affinity] = Field(default_factory=list)
    gang: bool = False
    """Place all tasks or none."""
    min_worker_set: bool = False
    """Keep the tasks on as few machines as hold them (Min-Worker-Set): machines already running
    the job's tasks rank first, before any preference, so a service that scales up starts few
    cold instances. A spread of `max_skew` below the count still spreads them."""
    harvest: bool = False
    """Whether tasks may run on harvest machines: their usable share shrinks at run time and
    their host may take them back with a short warning; the tasks that no longer fit move off
    with notice, through the job's TaskController."""
