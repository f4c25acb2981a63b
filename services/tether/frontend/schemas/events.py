"""What GET /v1/events streams besides events: the error that stands for events no longer kept."""

from __future__ import annotations

from typing import Literal

from tether.frontend.schemas import View


class EventGap(View):
    """Sent as `event: gap` when the events after Last-Event-ID are no longer kept (a
    compaction, or more events since than the frontend keeps); a RegionSnapshot follows."""

    type: Literal["about:blank"]
    title: str
    status: Literal[410]
    detail: str
    last_event_id: int
    """The revision the follower resumed after."""
    kept_after: int
    """Events after this revision are kept."""
