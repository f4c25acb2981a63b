"""Gavel runners' reports of their rounds, as the API and the dashboard read them."""

from __future__ import annotations

from tether.frontend import records
from tether.model.accelerator import AcceleratorReport
from tether.store import Store, keys


async def accelerator_reports(store: Store, visible: set[str] | None) -> list[AcceleratorReport]:
    """The last report of each entitlement in `visible` (None: every one)."""
    found = await records.scan(store, keys.ACCELERATOR_REPORTS, AcceleratorReport)
    return [report for report in found if visible is None or report.entitlement in visible]
