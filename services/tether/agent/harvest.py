"""A harvest machine's capacity trace: read and checked against the hardware, then replayed, each
step announced in the agent's heartbeat (the broker turns it into notices that move tasks)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pydantic

from tether.model import Machine, Resources, from_json
from tether.model.machine import Harvest, HarvestStep, beyond_capacity

_log = logging.getLogger(__name__)


class HarvestTraceError(ValueError):
    """A trace file that cannot be replayed; the message names the line and what is wrong."""


def read_trace(path: Path, capacity: Resources) -> list[HarvestStep]:
    """The steps of a JSON Lines trace (one `HarvestStep` a line; blank lines and lines starting
    with # skipped), in time order, each usable share within `capacity`."""
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise HarvestTraceError(f"{path}: {error.strerror or error}") from None
    steps: list[HarvestStep] = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            step = from_json(HarvestStep, line.encode())
        except pydantic.ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'line'}: {problem['msg']}"
                for problem in error.errors(include_url=False)
            )
            raise HarvestTraceError(f"{path}:{number}: {problems}") from None
        if step.usable is not None and not step.usable.fits_in(capacity):
            beyond = beyond_capacity(step.usable, capacity)
            raise HarvestTraceError(
                f"{path}:{number}: usable exceeds the machine's capacity: {beyond}"
            )
        if steps and step.at_s < steps[-1].at_s:
            raise HarvestTraceError(
                f"{path}:{number}: at_s {step.at_s} comes before the line above ({steps[-1].at_s})"
            )
        steps.append(step)
    return steps


def harvest_at(machine: Machine, step: HarvestStep, now: datetime) -> Machine:
    """The machine as it is once `step` happened at `now`."""
    usable = step.usable or machine.usable()
    evict_by = None if step.evict_in_s is None else now + timedelta(seconds=step.evict_in_s)
    return Machine.model_validate(
        {**dict(machine), "harvest": Harvest(usable=usable, evict_by=evict_by)}
    )


async def replay(
    steps: Sequence[HarvestStep],
    started: float,
    changed: Callable[[HarvestStep], Awaitable[None]],
) -> None:
    """Calls `changed` with each step at its time (`at_s` after `started`, a monotonic clock
    reading); a step already due is applied at once."""
    for step in steps:
        delay_s = started + step.at_s - time.monotonic()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        _log.info("harvest trace at %.0fs: %s", step.at_s, step.model_dump(exclude_none=True))
        await changed(step)
