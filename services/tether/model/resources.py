"""Resources: what a task needs and what a machine offers, with exact integer arithmetic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

from pydantic import Field, field_validator

from tether.model.base import MAX_QUANTITY, Name, Quantity, TetherModel

# Units of the fixed dimensions in messages. Extra resources are labelled "extra/<name>", which
# cannot collide with these labels since names have no '/'.
_UNITS: Final = {"cpu": " millicores", "memory": " MiB", "disk": " GiB", "gpus": ""}
EXTRA_PREFIX: Final = "extra/"


class ResourceOverflow(ValueError):
    """A sum of resources would exceed MAX_QUANTITY in some dimension."""

    def __init__(self, dimensions: list[str]) -> None:
        super().__init__(
            f"resource sum exceeds the maximum quantity {MAX_QUANTITY} in: {', '.join(dimensions)}"
        )
        self.dimensions = dimensions


class InsufficientResources(ValueError):
    """Subtracting would leave some dimension negative; `shortfall` says by how much."""

    def __init__(self, dimensions: list[str], shortfall: list[str]) -> None:
        super().__init__(f"insufficient resources: {'; '.join(shortfall)}")
        self.dimensions = dimensions
        self.shortfall = shortfall


class Resources(TetherModel):
    """An amount of every resource dimension; missing extra resources count as 0."""

    cpu: Quantity = 0
    """Millicores."""
    memory_mib: Quantity = 0
    disk_gib: Quantity = 0
    gpus: Quantity = 0
    extra: dict[Name, Quantity] = Field(default_factory=dict)
    """Custom and ephemeral resources (ESCHER), matched by name."""

    @field_validator("extra")
    @classmethod
    def _canonical_extra(cls, extra: dict[str, int]) -> dict[str, int]:
        # An absent key and a zero mean the same; dropping zeros (and sorting) makes equal
        # amounts compare and serialise equal.
        return {key: extra[key] for key in sorted(extra) if extra[key]}

    def is_zero(self) -> bool:
        """Whether every dimension is 0."""
        return not any(self.amounts().values())

    def fits_in(self, capacity: Resources) -> bool:
        """Whether `capacity` holds at least this much in every dimension."""
        return not self._deficits(capacity)

    def shortfall(self, capacity: Resources) -> list[str]:
        """One line per dimension where this does not fit in `capacity`, e.g.
        "memory: need 2048 MiB, 1024 free"; empty exactly when `fits_in(capacity)`."""
        return [
            f"{label}: need {quantity_text(label, need)}, {free} free"
            for label, need, free in self._deficits(capacity)
        ]

    def __add__(self, other: Resources) -> Resources:
        mine, theirs = self.amounts(), other.amounts()
        return _checked(
            {label: mine.get(label, 0) + theirs.get(label, 0) for label in mine | theirs}
        )

    def __mul__(self, count: int) -> Resources:
        """This much `count` times over (count x task resources); raises ResourceOverflow like
        `+` does."""
        if count < 0:
            raise ValueError(f"cannot take resources a negative number of times ({count})")
        return _checked({label: amount * count for label, amount in self.amounts().items()})

    def __sub__(self, other: Resources) -> Resources:
        deficits = other._deficits(self)
        if deficits:
            raise InsufficientResources([label for label, _, _ in deficits], other.shortfall(self))
        # Every dimension `other` has is also in self, or it would have been a deficit.
        theirs = other.amounts()
        return from_amounts(
            {label: amount - theirs.get(label, 0) for label, amount in self.amounts().items()}
        )

    def amounts(self) -> dict[str, int]:
        """Every dimension by label: "cpu", "memory", "disk", "gpus" and "extra/<name>"."""
        amounts = {
            "cpu": self.cpu,
            "memory": self.memory_mib,
            "disk": self.disk_gib,
            "gpus": self.gpus,
        }
        amounts.update({EXTRA_PREFIX + key: amount for key, amount in self.extra.items()})
        return amounts

    def _deficits(self, capacity: Resources) -> list[tuple[str, int, int]]:
        free = capacity.amounts()
        return [
            (label, need, free.get(label, 0))
            for label, need in self.amounts().items()
            if need > free.get(label, 0)
        ]


def quantity_text(label: str, amount: int) -> str:
    """An amount of the dimension `label` with its unit, e.g. "2048 MiB" for memory."""
    return f"{amount}{_UNITS.get(label, '')}"


def _checked(amounts: dict[str, int]) -> Resources:
    overflowing = [label for label, amount in amounts.items() if amount > MAX_QUANTITY]
    if overflowing:
        raise ResourceOverflow(overflowing)
    return from_amounts(amounts)


def from_amounts(amounts: Mapping[str, int]) -> Resources:
    """Resources from amounts by label, as `Resources.amounts()` gives them; a missing label
    counts as 0."""
    return Resources(
        cpu=amounts.get("cpu", 0),
        memory_mib=amounts.get("memory", 0),
        disk_gib=amounts.get("disk", 0),
        gpus=amounts.get("gpus", 0),
        extra={
            label.removeprefix(EXTRA_PREFIX): amount
            for label, amount in amounts.items()
            if label.startswith(EXTRA_PREFIX)
        },
    )


ZERO: Final = Resources()
"""No resources at all."""


class Amounts(Protocol):
    """What `resources_text` reads: a `Resources`, or the SDK's view of one."""

    @property
    def cpu(self) -> int: ...
    @property
    def memory_mib(self) -> int: ...
    @property
    def disk_gib(self) -> int: ...
    @property
    def gpus(self) -> int: ...
    @property
    def extra(self) -> Mapping[str, int]: ...


def resources_text(amounts: Amounts) -> str:
    """e.g. "cpu 2000m, mem 512Mi, gpus 1"; "0" when there is nothing."""
    parts = [
        f"{label} {amount}{unit}"
        for label, amount, unit in (
            ("cpu", amounts.cpu, "m"),
            ("mem", amounts.memory_mib, "Mi"),
            ("disk", amounts.disk_gib, "Gi"),
            ("gpus", amounts.gpus, ""),
        )
        if amount
    ]
    parts += [f"{name} {amount}" for name, amount in sorted(amounts.extra.items()) if amount]
    return ", ".join(parts) or "0"
