"""The index's columns: one row per machine id, numpy arrays that grow together, the resource
dimensions and the attribute columns."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from tether.allocator.index.codes import ABSENT, NONE, REGULAR, Codes
from tether.model import Resources
from tether.model.resources import EXTRA_PREFIX

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

BASE_DIMENSIONS: Final = ("cpu", "memory", "disk", "gpus")
"""Resource labels in column order; extra resources machines offer ("extra/<name>") follow as
machine records name them."""
RESOURCE_FIELDS: Final = (
    ("cpu", "cpu"),
    ("memory_mib", "memory"),
    ("disk_gib", "disk"),
    ("gpus", "gpus"),
)
"""(field of `Resources`, dimension label) of the base dimensions."""

_INITIAL_ROWS = 1024
_FILL: Final[dict[str, Any]] = {
    "capacity": 0,
    "used": 0,
    "free": 0,
    "state": ABSENT,
    "harvest": REGULAR,
    "dc": NONE,
    "msb": NONE,
    "rack": NONE,
    "hw": NONE,
    "profile": NONE,
    "owner": NONE,
    "target": NONE,
    "revision": 0,
    "digest": 0,
    "readable": True,
    "task_count": 0,
    "idle_since": math.nan,
}
"""Every per-row column and the value of a row nothing was written to."""


class Columns:
    """Per row: the machine record's facts (capacity, a harvest machine's usable share in its
    place, state, harvest, topology codes, hardware type, current host profile, attributes) and
    the allocation record's (owner, target profile, revision, idle since, readable, resources
    used, task count)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.dimensions: list[str] = list(BASE_DIMENSIONS)
        self.dimension_of: dict[str, int] = {label: i for i, label in enumerate(BASE_DIMENSIONS)}
        self._allocate(_INITIAL_ROWS)
        self.attributes: dict[str, I32] = {}
        self.attribute_values: dict[str, Codes] = {}
        self._numbers: dict[str, npt.NDArray[np.float64]] = {}

    def _allocate(self, rows: int) -> None:
        width = len(self.dimensions)
        self.capacity: I64 = np.zeros((rows, width), np.int64)
        self.used: I64 = np.zeros((rows, width), np.int64)
        self.free: I64 = np.zeros((rows, width), np.int64)
        """`capacity - used`, kept with them: placement reads rows of it at random, and one
        gather costs half of two."""
        self.state: npt.NDArray[np.int8] = np.full(rows, ABSENT, np.int8)
        self.harvest: npt.NDArray[np.int8] = np.full(rows, REGULAR, np.int8)
        """REGULAR, HARVEST or EVICTING (`codes`)."""
        self.dc: I32 = np.full(rows, NONE, np.int32)
        self.msb: I32 = np.full(rows, NONE, np.int32)
        self.rack: I32 = np.full(rows, NONE, np.int32)
        self.hw: I32 = np.full(rows, NONE, np.int32)
        self.profile: I32 = np.full(rows, NONE, np.int32)
        self.owner: I32 = np.full(rows, NONE, np.int32)
        self.target: I32 = np.full(rows, NONE, np.int32)
        self.revision: I64 = np.zeros(rows, np.int64)
        self.digest: I64 = np.zeros(rows, np.int64)
        """Hash of the machine record's value (0: none), to skip records that did not change."""
        self.readable: npt.NDArray[np.bool_] = np.ones(rows, np.bool_)
        self.task_count: I32 = np.zeros(rows, np.int32)
        self.idle_since: npt.NDArray[np.float64] = np.full(rows, math.nan)

    def _grow(self) -> None:
        old = len(self.state)
        for name, fill in _FILL.items():
            column = getattr(self, name)
            grown = np.resize(column, (old * 2, *column.shape[1:]))
            grown[old:] = fill
            setattr(self, name, grown)
        for attribute, column in self.attributes.items():
            grown = np.resize(column, old * 2)
            grown[old:] = NONE
            self.attributes[attribute] = grown
        self._numbers.clear()

    def row(self, machine_id: str) -> int:
        """The machine's row, added now if the id is new."""
        row = self.row_of.get(machine_id)
        if row is None:
            row = self.row_of[machine_id] = len(self.ids)
            self.ids.append(machine_id)
            if row >= len(self.state):
                self._grow()
        return row

    # --- resources ---------------------------------------------------------------------------

    def dimension(self, label: str) -> int:
        """The resource's column, added now if the label is new."""
        column = self.dimension_of.get(label)
        if column is None:
            column = self.dimension_of[label] = len(self.dimensions)
            self.dimensions.append(label)
            rows = len(self.state)
            self.capacity = np.hstack([self.capacity, np.zeros((rows, 1), np.int64)])
            self.used = np.hstack([self.used, np.zeros((rows, 1), np.int64)])
            self.free = np.hstack([self.free, np.zeros((rows, 1), np.int64)])
        return column

    def vector(self, resources: Resources) -> I64:
        """`resources` as a row of the resource columns. Only dimensions machines offer have
        one: an extra resource no machine offers is an ephemeral resource, counted apart."""
        return self._vector(resources.amounts())

    def vector_of(self, data: Mapping[str, Any]) -> I64:
        """The JSON data of `Resources` as a row of the resource columns (as `vector`)."""
        amounts = {label: data.get(field, 0) for field, label in RESOURCE_FIELDS}
        extra = data.get("extra") or {}
        amounts.update({EXTRA_PREFIX + name: amount for name, amount in extra.items()})
        return self._vector(amounts)

    def _vector(self, amounts: Mapping[str, int]) -> I64:
        vector = np.zeros(len(self.dimensions), np.int64)
        for label, amount in amounts.items():
            column = self.dimension_of.get(label)
            if column is not None and amount:
                vector[column] = amount
        return vector

    def widened(self, vector: I64) -> I64:
        """`vector` with a zero for every dimension added since it was made."""
        missing = len(self.dimensions) - len(vector)
        return np.append(vector, np.zeros(missing, np.int64)) if missing > 0 else vector

    # --- attributes --------------------------------------------------------------------------

    def numbers(self, attribute: str) -> npt.NDArray[np.float64]:
        """The attribute as numbers per row (NaN: missing or not a number), computed once."""
        numbers = self._numbers.get(attribute)
        if numbers is None:
            codes = self.attributes.get(attribute)
            values = self.attribute_values.get(attribute)
            numbers = np.full(len(self.state), math.nan)
            if codes is not None and values is not None:
                table = np.array([_number(name) for name in values.names] + [math.nan])
                numbers = table[codes]  # NONE (-1) picks the trailing NaN
            self._numbers[attribute] = numbers
        return numbers

    def attribute_column(self, attribute: str) -> I32:
        column = self.attributes.get(attribute)
        if column is None:
            column = self.attributes[attribute] = np.full(len(self.state), NONE, np.int32)
            self.attribute_values[attribute] = Codes()
        return column

    def set_attributes(self, row: int, new: Mapping[str, str]) -> None:
        for attribute, column in self.attributes.items():
            if attribute not in new:
                column[row] = NONE
        for attribute, value in new.items():
            column = self.attribute_column(attribute)
            column[row] = self.attribute_values[attribute].code(value)

    def attributes_changed(self) -> None:
        """Attribute values changed: the numbers computed from them are stale."""
        self._numbers.clear()


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
