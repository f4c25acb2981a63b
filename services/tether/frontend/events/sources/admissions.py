"""Admission to an entitlement's quota: a job queued, admitted (or resized), preempted."""

from __future__ import annotations

from dataclasses import dataclass

from tether.frontend.events.sources.base import Change, Source, of_job, read
from tether.model.admission import Admission, AdmissionEventKind, AdmissionState
from tether.model.event import EventKind, RegionEvent, RegionObject
from tether.store import KeyValue, keys


@dataclass(frozen=True, slots=True)
class AdmissionSeen:
    state: AdmissionState
    admitted: int
    tasks: int
    preemptions: int
    reason: str
    preempted_by: str | None
    cause: str


class Admissions(Source[AdmissionSeen]):
    prefix = keys.ADMISSIONS

    def digest(self, kv: KeyValue) -> AdmissionSeen | None:
        record = read(Admission, kv)
        if record is None:
            return None
        preempted = [e for e in record.history if e.kind is AdmissionEventKind.PREEMPTED]
        cause = preempted[-1].cause if preempted and preempted[-1].cause else ""
        return AdmissionSeen(
            record.state,
            record.admitted,
            record.tasks,
            record.preemptions,
            record.reason,
            record.preempted_by,
            cause,
        )

    def state(self, key: str, digest: AdmissionSeen) -> RegionObject:
        return RegionObject(
            what="admission",
            **of_job(self.name(key)),
            state=digest.state.value,
            detail=f"{digest.admitted} of {digest.tasks} task(s) admitted",
        )

    def events(
        self, key: str, before: AdmissionSeen | None, after: AdmissionSeen | None, change: Change
    ) -> list[RegionEvent]:
        if after is None:
            return []
        about = {**of_job(self.name(key)), "state": after.state.value}
        found = []
        if after.preemptions > (before.preemptions if before else 0):
            by = f"by {after.preempted_by}" if after.preempted_by else "by its owner"
            detail = f"{by} ({after.cause})" if after.cause else by
            found.append(change.event(EventKind.JOB_PREEMPTED, detail=detail, **about))
        moved = before is None or before.state is not after.state
        if after.state is AdmissionState.QUEUED and moved:
            found.append(change.event(EventKind.JOB_QUEUED, detail=after.reason, **about))
        resized = before is not None and before.admitted != after.admitted
        if after.state is AdmissionState.ADMITTED and (moved or resized):
            detail = f"{after.admitted} of {after.tasks} task(s)"
            found.append(change.event(EventKind.JOB_ADMITTED, detail=detail, **about))
        return found
