"""Every event source, one line each: what the stream follows."""

from __future__ import annotations

from typing import Any, Final

from tether.frontend.events.sources.admissions import Admissions
from tether.frontend.events.sources.base import Source
from tether.frontend.events.sources.jobs import Jobs
from tether.frontend.events.sources.machines import Machines
from tether.frontend.events.sources.members import Members
from tether.frontend.events.sources.operations import Operations
from tether.frontend.events.sources.owners import Owners
from tether.frontend.events.sources.shards import Shards
from tether.frontend.events.sources.statuses import Statuses
from tether.frontend.events.sources.tasks import Tasks

SOURCES: Final[tuple[Source[Any], ...]] = (
    Members(),
    Owners(),
    Jobs(),
    Admissions(),
    Tasks(),
    Statuses(),
    Operations(),
    Machines(),
    Shards(),
)
