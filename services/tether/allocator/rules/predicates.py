"""Attribute predicates over the index's columns, shared by constraints and preferences."""

from __future__ import annotations

import numpy as np

from tether.allocator.index import NONE, AllocationIndex
from tether.allocator.rules.checks import Mask, Rows, member_of
from tether.model import AttributePredicate, ConstraintOp


def predicate_text(predicate: AttributePredicate) -> str:
    """The predicate as people write it, e.g. "zone in [a, b]"."""
    if predicate.op is ConstraintOp.EXISTS:
        return f"{predicate.attribute} exists"
    if predicate.op in (ConstraintOp.IN, ConstraintOp.NOT_IN):
        return f"{predicate.attribute} {predicate.op.value} [{', '.join(predicate.values)}]"
    return f"{predicate.attribute} {predicate.op.value} {predicate.value}"


def matches(index: AllocationIndex, predicate: AttributePredicate, rows: Rows) -> Mask:
    """Which rows satisfy `predicate`.

    A missing attribute fails every operator except `!=` and `not_in`, which it satisfies (it
    is not the excluded value); `>=` and `<=` fail for an attribute that is not a number.
    """
    op = predicate.op
    if op in (ConstraintOp.GE, ConstraintOp.LE):
        numbers = index.numbers(predicate.attribute)[rows]
        # The model guarantees a numeric operand for these operators.
        bound = float(predicate.value or "nan")
        with np.errstate(invalid="ignore"):
            return numbers >= bound if op is ConstraintOp.GE else numbers <= bound
    codes = index.attributes.get(predicate.attribute)
    if codes is None:
        return np.full(len(rows), op in (ConstraintOp.NE, ConstraintOp.NOT_IN))
    values = index.attribute_values[predicate.attribute]
    column = codes[rows]
    present: Mask = column != NONE
    match op:
        case ConstraintOp.EXISTS:
            return present
        case ConstraintOp.EQ | ConstraintOp.NE:
            equal: Mask = (column == values.find(predicate.value)) & present
            return equal if op is ConstraintOp.EQ else ~equal
        case _:
            wanted = [code for code in map(values.find, predicate.values) if code != NONE]
            inside = member_of(column, wanted)
            return inside if op is ConstraintOp.IN else ~inside
