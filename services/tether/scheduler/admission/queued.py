"""One job as the admission queues see it."""

from __future__ import annotations

from dataclasses import dataclass

from tether.model.admission import Admission
from tether.model.quota_tree import Vector


@dataclass(slots=True)
class QueuedJob:
    """One job as the queues see it."""

    entitlement: str
    admission: Admission
    revision: int
    """The mod revision of its admission record (0: none is stored yet)."""
    holding: int
    """Tasks that hold resources or may claim them now: on a machine, or admitted and not
    finished for good."""
    closed: bool = False
    """Its job is being deleted: never admitted again, never a victim."""
    suspended: bool = False
    """Its job is suspended (`JobSpec.suspended`): its admitted tasks are stopped with notice,
    as if preempted, and it is not admitted again until it is resumed. It keeps its place."""
    demand: Vector | None = None
    """Per task, over the tree's dimensions; None when no quota of the tree has a dimension it
    needs (it can never be admitted). Set by `AdmissionQueues.put`."""

    @property
    def handle(self) -> str:
        return self.admission.job
