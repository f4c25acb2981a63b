"""The allocator's domain errors; the gRPC layer maps each to a status code."""

from __future__ import annotations


class AllocatorError(Exception):
    """A request the allocator refuses; the message says why, for people."""


class InvalidRequest(AllocatorError):
    """The request itself is malformed (job handle, task indexes)."""


class JobNotFound(AllocatorError):
    """The job named by the request is not in the store."""


class PreconditionFailed(AllocatorError):
    """The request is well formed but the region's state does not allow it."""


class StaleGeneration(PreconditionFailed):
    """The store holds another generation of the job than the caller decided on."""


class JobDeleting(PreconditionFailed):
    """The job is being deleted, so no new task of it is placed."""


class UnknownEntitlement(PreconditionFailed):
    """The job's entitlement does not exist, so it has no quota."""


class TooManyConflicts(AllocatorError):
    """Other allocators kept changing the same records; the request may be retried."""


class CorruptRecord(AllocatorError):
    """A record in the store is not a valid model; an operator must fix it."""
