"""The answers of /v1/accelerator-reports: Gavel runners' last rounds."""

from __future__ import annotations

from tether.frontend.schemas import View
from tether.model.accelerator import AcceleratorReport


class AcceleratorReportList(View):
    accelerator_reports: list[AcceleratorReport]
