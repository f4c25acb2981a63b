"""What the deciders publish of their trees: a `QueueStatus` per tree for `GET /v1/queues`, and
the queue and quota gauges (pure but for the gauges)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime

from tether import metrics
from tether.model.admission import AdmissionState, EntitlementUse, QueueStatus
from tether.scheduler.admission.queues import AdmissionQueues


def tree_statuses(
    queues: AdmissionQueues, roots: Mapping[str, str], decider: str, now: datetime
) -> list[QueueStatus]:
    """One status per tree: each entitlement's reservation, borrowing, lending and jobs."""
    queued: Counter[str] = Counter()
    admitted: Counter[str] = Counter()
    for job in queues.jobs.values():
        if job.closed:
            continue
        if job.admission.state is AdmissionState.QUEUED:
            queued[job.entitlement] += 1
        else:
            admitted[job.entitlement] += 1
    tree = queues.tree
    by_root: dict[str, list[EntitlementUse]] = {}
    for name, root in sorted(roots.items()):
        if name not in tree.nodes:
            continue
        node = tree.nodes[name]
        entitlement = node.entitlement
        by_root.setdefault(root, []).append(
            EntitlementUse(
                name=name,
                parent=node.parent,
                weight=entitlement.weight,
                quota=entitlement.quota.resources,
                reserved=tree.resources(node.consumption),
                borrowed=tree.resources(tree.borrowed(name)),
                lent=tree.resources(tree.lent(name)),
                dominant_share=tree.dominant_share(name),
                queued=queued[name],
                admitted=admitted[name],
            )
        )
    return [
        QueueStatus(root=root, decider=decider, entitlements=uses, updated_at=now)
        for root, uses in by_root.items()
    ]


def set_gauges(statuses: list[QueueStatus]) -> None:
    """The queue length and the borrowed and lent quota of every entitlement."""
    for status in statuses:
        for use in status.entitlements:
            metrics.QUEUED_JOBS.labels(use.name).set(use.queued)
            for gauge, amounts in (
                (metrics.QUOTA_BORROWED, use.borrowed),
                (metrics.QUOTA_LENT, use.lent),
            ):
                for dimension, amount in amounts.amounts().items():
                    gauge.labels(use.name, dimension).set(amount)
