"""What a harvest machine's report calls for (pure): which of its tasks must move when its
usable share shrinks below them, and the notices that move them (`MaintenanceKind.HARVEST_SHRINK`)
or the whole machine (`MaintenanceKind.EVICTION`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Final

from tether.model import AdvanceNotice, Machine, MaintenanceKind, Resources, drain_id
from tether.model.resources import ZERO, quantity_text

WINDOW_S: Final = 3600
"""How long a harvest notice lasts past its start: the scheduler moves what it names by the
start, and the broker replaces or deletes it with the machine's next report."""


def displaced(
    held: Mapping[str, Resources], priorities: Mapping[str, int], usable: Resources
) -> list[str]:
    """The tasks (`<entitlement>/<job>/<index>` -> what each holds) that must move for the rest
    to fit `usable`: the lowest priority first, then the biggest in the dimension most over;
    then any of those the rest fits without after all goes back, the last taken first. Empty
    when all fit."""
    left = dict(held)
    total = sum(left.values(), ZERO)
    moved: list[str] = []
    while left and not total.fits_in(usable):
        over = max(
            (amount - usable.amounts().get(label, 0), label)
            for label, amount in total.amounts().items()
        )[1]
        task = min(
            left, key=lambda t: (priorities.get(_job(t), 0), -left[t].amounts().get(over, 0), t)
        )
        total = total - left.pop(task)
        moved.append(task)
    for task in reversed(list(moved)):
        if (total + held[task]).fits_in(usable):
            total = total + held[task]
            moved.remove(task)
    return sorted(moved)


def harvest_notices(
    machine: Machine,
    held: Mapping[str, Resources],
    priorities: Mapping[str, int],
    existing: Mapping[str, AdvanceNotice],
    now: datetime,
    notice_s: float,
) -> dict[str, AdvanceNotice | None]:
    """The machine's harvest notices, by id (None: delete it): an eviction while its report
    carries one; a shrink naming the `displaced` tasks, due `notice_s` after they were first
    found (an unchanged notice is kept as it is)."""
    shrink_id = drain_id(MaintenanceKind.HARVEST_SHRINK, machine.id)
    eviction_id = drain_id(MaintenanceKind.EVICTION, machine.id)
    harvest = machine.harvest
    wanted: dict[str, AdvanceNotice | None] = {shrink_id: None, eviction_id: None}
    if harvest is None:
        return wanted
    if harvest.evict_by is not None:
        wanted[eviction_id] = AdvanceNotice(
            id=eviction_id,
            machines=[machine.id],
            start=harvest.evict_by,
            duration_s=WINDOW_S,
            kind=MaintenanceKind.EVICTION,
            reason="its host takes the harvest machine back",
        )
    tasks = displaced(held, priorities, harvest.usable)
    if tasks:
        kept = existing.get(shrink_id)
        if kept is not None and kept.tasks == tasks:
            wanted[shrink_id] = kept
        else:
            wanted[shrink_id] = AdvanceNotice(
                id=shrink_id,
                machines=[machine.id],
                start=now + timedelta(seconds=notice_s),
                duration_s=WINDOW_S,
                kind=MaintenanceKind.HARVEST_SHRINK,
                reason=f"the harvest machine's usable share shrank to {_text(harvest.usable)}",
                tasks=tasks,
            )
    return wanted


def capacity_change(before: Machine | None, after: Machine) -> str | None:
    """How a report changed a harvest machine's usable share: "shrink" (any dimension less),
    "grow", or None (unchanged, or not a harvest machine)."""
    if after.harvest is None or before is None:
        return None
    old, new = before.usable().amounts(), after.usable().amounts()
    if old == new:
        return None
    return "shrink" if any(new.get(label, 0) < amount for label, amount in old.items()) else "grow"


def _job(task: str) -> str:
    """The job handle of a task id `<entitlement>/<job>/<index>`."""
    return task.rsplit("/", 1)[0]


def _text(resources: Resources) -> str:
    return ", ".join(
        quantity_text(label, amount) for label, amount in resources.amounts().items() if amount
    )
