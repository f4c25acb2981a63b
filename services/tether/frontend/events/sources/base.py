"""What an event source is: a prefix of the keyspace, what it keeps of each key (its digest),
and the events between a key's digest before a change and after it (a pure function)."""

from __future__ import annotations

import abc
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import ValidationError

from tether.model import TetherModel, from_json
from tether.model.event import EventKind, RegionEvent, RegionObject
from tether.store import KeyValue, keys

D = TypeVar("D", bound=Hashable)
M = TypeVar("M", bound=TetherModel)


@dataclass(frozen=True, slots=True)
class Change:
    """One change's place in the stream: its store revision, and when the frontend saw it."""

    revision: int
    seen_at: datetime

    def event(self, kind: EventKind, **fields: Any) -> RegionEvent:
        """An event of this change."""
        return RegionEvent(revision=self.revision, kind=kind, at=self.seen_at, **fields)


class Source(abc.ABC, Generic[D]):
    """The events of the keys under `prefix`."""

    prefix: ClassVar[str]

    @abc.abstractmethod
    def digest(self, kv: KeyValue) -> D | None:
        """What the key's next change is compared with; None for a key the source ignores (or
        a record it cannot read)."""

    @abc.abstractmethod
    def events(
        self, key: str, before: D | None, after: D | None, change: Change
    ) -> list[RegionEvent]:
        """The events of the key going from `before` to `after` (None: it did not exist)."""

    def state(self, key: str, digest: D) -> RegionObject | None:
        """What the key's digest tells of its state now, for a snapshot; None: nothing."""
        return None

    def name(self, key: str) -> str:
        """The key below the prefix, e.g. `<entitlement>/<job>`."""
        return key[len(self.prefix) :]


def of_job(handle: str) -> dict[str, Any]:
    """What an event or a state of the job `handle` is about: its entitlement and handle."""
    return {"entitlement": handle.split("/")[0], "job": handle}


def of_task(key: str) -> dict[str, Any]:
    """What an event or a state of the task at `key` (a task's or a status's) is about."""
    entitlement, job, index = keys.task_of_key(key)
    return {**of_job(f"{entitlement}/{job}"), "task": index}


def read(model: type[M], kv: KeyValue) -> M | None:
    """The record `kv` holds; None when it holds none (a source skips what it cannot read, as
    every other reader of the store does)."""
    try:
        return from_json(model, kv.value, stored=True)
    except ValidationError:
        return None
