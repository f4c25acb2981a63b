"""Jobs: submitted, updated (a new generation of the spec), being deleted, deleted."""

from __future__ import annotations

from dataclasses import dataclass

from tether.frontend.events.sources.base import Change, Source, of_job, read
from tether.model import Job
from tether.model.event import EventKind, RegionEvent, RegionObject
from tether.store import KeyValue, keys


@dataclass(frozen=True, slots=True)
class JobSeen:
    generation: int
    count: int
    deleting: bool


class Jobs(Source[JobSeen]):
    prefix = keys.JOBS

    def digest(self, kv: KeyValue) -> JobSeen | None:
        job = read(Job, kv)
        return None if job is None else JobSeen(job.generation, job.spec.count, job.deleting)

    def state(self, key: str, digest: JobSeen) -> RegionObject:
        return RegionObject(
            what="job",
            **of_job(self.name(key)),
            state="deleting" if digest.deleting else "active",
            detail=f"generation {digest.generation}, {digest.count} task(s)",
        )

    def events(
        self, key: str, before: JobSeen | None, after: JobSeen | None, change: Change
    ) -> list[RegionEvent]:
        about = of_job(self.name(key))
        if after is None:
            return [change.event(EventKind.JOB_DELETED, **about)] if before else []
        tasks = f"{after.count} task(s)"
        if before is None:
            return [change.event(EventKind.JOB_SUBMITTED, detail=tasks, **about)]
        found = []
        if after.generation != before.generation:
            detail = f"generation {after.generation}, {tasks}"
            found.append(change.event(EventKind.JOB_UPDATED, detail=detail, **about))
        if after.deleting and not before.deleting:
            found.append(change.event(EventKind.JOB_DELETING, **about))
        return found
