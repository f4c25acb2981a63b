"""Machine records (`machines/<id>`): read fast into codes, applied to the columns."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from pydantic import ValidationError

from tether.allocator.index.codes import (
    ABSENT,
    EVICTING,
    HARVEST,
    NONE,
    REGULAR,
    STATE_CODES,
    Codes,
)
from tether.allocator.index.columns import RESOURCE_FIELDS, Columns
from tether.allocator.index.ownership import Ownership
from tether.allocator.index.topology import Topology
from tether.model import Machine, MachineState, from_json
from tether.model.resources import EXTRA_PREFIX

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MachineInfo:
    """The static part of a machine record, as the columns keep it."""

    state: int
    harvest: int
    dc: int
    msb: int
    rack: int
    hardware: int
    profile: int
    capacity: dict[str, int]
    """A harvest machine's usable share."""
    attributes: dict[str, str]


class MachineReader:
    """Turns machine records into `MachineInfo`, interning their names."""

    def __init__(self, topology: Topology, hardware: Codes, profiles: Codes) -> None:
        self.topology = topology
        self.hardware = hardware
        self.profiles = profiles

    def read(self, machine_id: str, value: bytes) -> MachineInfo | None:
        """The record read with orjson (a pydantic model costs about 1 KB and 20 µs a
        machine); None, logged, for a record that is not a valid `Machine` of that id."""
        try:
            data = orjson.loads(value)
            topology = data["topology"]
            dc, msb, rack = topology["dc"], topology["msb"], topology["rack"]
            amounts = _amounts(data["capacity"])
            harvest = data.get("harvest")
            if harvest is None:
                harvest_code = REGULAR
            else:
                usable = _amounts(harvest["usable"])
                if any(amount > amounts.get(label, 0) for label, amount in usable.items()):
                    raise ValueError("malformed")
                amounts = {label: usable.get(label, 0) for label in amounts}
                harvest_code = HARVEST if harvest.get("evict_by") is None else EVICTING
            state = STATE_CODES[MachineState(data.get("state", "up"))]
            attributes = dict(data.get("attributes") or {})
            hardware = data["hardware_type"]
            current = data.get("host_profile_current")
            if (
                not all(isinstance(v, str) for v in (dc, msb, rack, hardware))
                or data.get("id") != machine_id
                or any(amount < 0 for amount in amounts.values())
            ):
                raise ValueError("malformed")
        except (ValueError, KeyError, TypeError, AttributeError):
            # The fast path could not read it; the model says exactly what is wrong.
            try:
                machine = from_json(Machine, value, stored=True)
            except ValidationError as error:
                _log.warning("ignoring machine %s: not a valid Machine: %s", machine_id, error)
                return None
            if machine.id != machine_id:
                _log.warning("ignoring machines/%s: it holds machine %s", machine_id, machine.id)
                return None
            return self.read(machine_id, machine.model_dump_json().encode())
        dc_code, msb_code, rack_code = self.topology.codes(dc, msb, rack)
        return MachineInfo(
            state=state,
            harvest=harvest_code,
            dc=dc_code,
            msb=msb_code,
            rack=rack_code,
            hardware=self.hardware.code(hardware),
            profile=NONE if current is None else self.profiles.code(current),
            capacity=amounts,
            attributes=attributes,
        )


def _amounts(resources: dict[str, Any]) -> dict[str, int]:
    """Dimension label -> amount of the JSON data of `Resources`."""
    amounts = {label: int(resources.get(field, 0)) for field, label in RESOURCE_FIELDS}
    amounts.update({EXTRA_PREFIX + k: int(v) for k, v in resources.get("extra", {}).items()})
    return amounts


class MachineRecords:
    """Applies machine records to the columns and the free pool."""

    def __init__(self, columns: Columns, ownership: Ownership, reader: MachineReader) -> None:
        self._columns = columns
        self._ownership = ownership
        self._reader = reader

    def set_machine(self, machine_id: str, value: bytes | None) -> None:
        """Applies the current value of `machines/<machine_id>` (None: deleted)."""
        columns = self._columns
        digest = 0 if value is None else hash(value) or 1
        row = columns.row_of.get(machine_id)
        if row is not None and columns.digest[row] == digest:
            return
        info = None if value is None else self._reader.read(machine_id, value)
        if info is None and row is None:
            return
        row = columns.row(machine_id)
        columns.digest[row] = digest if info is not None else 0
        old_msb, old_hardware = int(columns.msb[row]), int(columns.hw[row])
        if info is None:
            columns.state[row] = ABSENT
            columns.harvest[row] = REGULAR
            columns.capacity[row] = 0
            columns.free[row] = -columns.used[row]
            columns.set_attributes(row, {})
        else:
            columns.state[row], columns.harvest[row] = info.state, info.harvest
            columns.dc[row], columns.msb[row], columns.rack[row] = info.dc, info.msb, info.rack
            columns.hw[row], columns.profile[row] = info.hardware, info.profile
            dimensions = [columns.dimension(label) for label in info.capacity]
            columns.capacity[row] = 0
            columns.capacity[row, dimensions] = list(info.capacity.values())
            columns.free[row] = columns.capacity[row] - columns.used[row]
            columns.set_attributes(row, info.attributes)
        self._ownership.machine_changed(row, old_msb, old_hardware)
        columns.attributes_changed()

    def set_machines(self, machines: Sequence[tuple[str, bytes]]) -> None:
        """Applies many machine records at once (a page of the first listing): new machines go
        into the columns in one assignment per column; any other goes through `set_machine`."""
        columns = self._columns
        rows: list[int] = []
        infos: list[MachineInfo] = []
        digests: list[int] = []
        for machine_id, value in machines:
            row = columns.row_of.get(machine_id)
            if row is not None and (columns.digest[row] or columns.owner[row] != NONE):
                self.set_machine(machine_id, value)
                continue
            info = self._reader.read(machine_id, value)
            if info is None:
                continue
            rows.append(columns.row(machine_id))
            infos.append(info)
            digests.append(hash(value) or 1)
        if not rows:
            return
        at = np.array(rows, np.intp)
        columns.digest[at] = digests
        columns.state[at] = [info.state for info in infos]
        columns.harvest[at] = [info.harvest for info in infos]
        columns.dc[at] = [info.dc for info in infos]
        columns.msb[at] = [info.msb for info in infos]
        columns.rack[at] = [info.rack for info in infos]
        columns.hw[at] = [info.hardware for info in infos]
        columns.profile[at] = [info.profile for info in infos]
        capacity = np.zeros((len(rows), len(columns.dimensions)), np.int64)
        for position, info in enumerate(infos):
            for label, amount in info.capacity.items():
                column = columns.dimension(label)
                if column >= capacity.shape[1]:
                    capacity = np.hstack(
                        [capacity, np.zeros((len(rows), column + 1 - capacity.shape[1]), np.int64)]
                    )
                capacity[position, column] = amount
        columns.capacity[at] = capacity
        columns.free[at] = capacity - columns.used[at]
        by_attribute: dict[str, tuple[list[int], list[int]]] = {}
        for row, info in zip(rows, infos, strict=True):
            for attribute, label in info.attributes.items():
                codes = columns.attribute_values.get(attribute)
                if codes is None:
                    columns.attribute_column(attribute)
                    codes = columns.attribute_values[attribute]
                where, what = by_attribute.setdefault(attribute, ([], []))
                where.append(row)
                what.append(codes.code(label))
        for attribute, (where, what) in by_attribute.items():
            columns.attributes[attribute][where] = what
        self._ownership.add_new_to_pool(rows, [info.msb for info in infos])
        columns.attributes_changed()
