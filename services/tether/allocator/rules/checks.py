"""Checks: the row masks filters apply, how they are applied in order, and the account of what
each one rejected."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Rows = npt.NDArray[np.intp]
Mask = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]

UNLIMITED_ROOM = 1 << 20
"""The room of a machine for a job that needs none of what a capacity rule counts."""


@dataclass(frozen=True, slots=True)
class Check:
    """One mask a filter applies: which rows it accepts, and how to explain its rejections."""

    name: str
    """For Explain, e.g. "resources.memory" or "constraint zone in [a, b]"."""
    reason: str
    """Why a rejected machine does not fit, for people, e.g. "insufficient memory"."""
    accepts: Callable[[Rows], Mask]
    describe: Callable[[Rows, Rows], str] = lambda examined, rejected: ""
    """(rows the check examined, rows it rejected) -> detail, e.g. the closest miss."""


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """What one check did: how many machines it rejected that earlier checks let through."""

    rule: str
    reason: str
    rejected: int
    detail: str


@dataclass(frozen=True, slots=True)
class Filtered:
    """The rows every check accepted, and what each check rejected."""

    survivors: Rows
    outcomes: list[RuleOutcome]
    considered: int


def listed(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def apply_checks(rows: Rows, checks: Sequence[Check]) -> Filtered:
    """Applies `checks` in order; each one sees only the rows every earlier one accepted."""
    survivors = rows
    outcomes: list[RuleOutcome] = []
    for check in checks:
        accepted = check.accepts(survivors) if len(survivors) else np.zeros(0, np.bool_)
        rejected = survivors[~accepted]
        detail = check.describe(survivors, rejected) if len(rejected) else ""
        outcomes.append(RuleOutcome(check.name, check.reason, len(rejected), detail))
        survivors = survivors[accepted]
    return Filtered(survivors, outcomes, len(rows))


def accepted_by_all(checks: Sequence[Check], rows: Rows) -> Mask:
    """Per row, whether every check accepts it (no accounting)."""
    mask = np.ones(len(rows), np.bool_)
    for check in checks:
        mask &= check.accepts(rows)
    return mask


def passes(checks: Sequence[Check], rows: Rows) -> Rows:
    """The rows every check accepts (no accounting)."""
    for check in checks:
        if not len(rows):
            break
        rows = rows[check.accepts(rows)]
    return rows


# Up to this many codes, comparing with each beats np.isin, which sorts (47 µs against 3 µs
# for a pool chunk of 64 rows and two codes).
_FEW_CODES = 8


def member_of(values: npt.NDArray[np.integer], codes: Sequence[int]) -> Mask:
    """Per value, whether it is one of `codes` (np.isin, quicker for a few codes)."""
    if len(codes) > _FEW_CODES:
        return np.isin(values, codes)
    mask = np.zeros(len(values), np.bool_)
    for code in codes:
        mask |= values == code
    return mask


def rejections(outcomes: Sequence[RuleOutcome], considered: int, *, details: bool) -> str:
    """E.g. "3 of 4 machines: insufficient memory (need ...); 1 of 4: not up", largest first."""
    if not considered:
        return "the region has no machines"
    parts: list[str] = []
    for outcome in sorted((o for o in outcomes if o.rejected), key=lambda o: -o.rejected):
        machines = " machines" if not parts else ""
        detail = f" ({outcome.detail})" if details and outcome.detail else ""
        parts.append(f"{outcome.rejected} of {considered}{machines}: {outcome.reason}{detail}")
    return "; ".join(parts)
