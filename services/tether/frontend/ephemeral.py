"""Ephemeral resources (ESCHER's `set_resource`): setting a grant of an entitlement's label,
the cluster state an allocator counts, deleting. A lowering never leaves running tasks holding
more than the capacity: it asks an allocator which machines it would over-hold, and its write
compares the entitlement's quota fence, which every placement of the entitlement bumps."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import groupby

from pydantic import ValidationError

from tether.allocator_calls import AllocatorRefused, AllocatorUnavailable
from tether.frontend import records
from tether.frontend.allocators import Allocators, refusal_problem
from tether.frontend.problems import (
    Conflict,
    NotFound,
    Unavailable,
    validation_problem,
)
from tether.frontend.schemas.resources import (
    MachineShareView,
    ResourceView,
    SetResourceRequest,
)
from tether.model import Job, Machine, to_json
from tether.model.ephemeral import EphemeralResource, ResourceGrant
from tether.proto.allocator.v1 import allocator_pb2
from tether.store import Delete, Get, Put, Store, key_exists, key_missing, keys, mod_revision_is
from tether.store.cache import StoreCache

_ATTEMPTS = 5
"""Writes tried before a set gives up: each failed one lost to a placement or another set."""


async def set_resource(
    store: Store, cache: StoreCache, allocators: Allocators, wanted: SetResourceRequest
) -> EphemeralResource:
    """Sets `wanted`'s grant on its label (creating the label), answering with the record.

    422 for a machine or owner job that does not exist, or too many grants; 409 when the
    capacity would drop under what running tasks hold (naming them), while the entitlement is
    being deleted, or when placements kept changing the entitlement meanwhile.

    The record is read from the frontend's cache, and the write compares its revision: a copy
    a moment behind costs one more attempt, whose record comes back with the failed write."""
    await _check_targets(store, cache, wanted)
    ent, label = wanted.entitlement, wanted.label
    key, fence_key = keys.ephemeral_resource(ent, label), keys.quota_fence(ent)
    grant = ResourceGrant(node_spec=wanted.node_spec, capacity=wanted.capacity)
    found = await records.get(records.as_cached(store, cache), key, EphemeralResource)
    for _ in range(_ATTEMPTS):
        current = None if found is None else found.model
        record = _updated(current, wanted, grant, datetime.now(UTC))
        compares = [
            key_missing(key) if found is None else mod_revision_is(key, found.kv.mod_revision),
            key_exists(keys.entitlement(ent)),
            key_missing(keys.entitlement_deletion(ent)),
        ]
        if current is not None and _may_lower(current, grant):
            fence = await store.get(fence_key)
            fenced_at = 0 if fence is None else fence.mod_revision
            await _refuse_over_holding(allocators, record, fenced_at)
            compares.append(mod_revision_is(fence_key, fenced_at))
        written = await store.txn(
            compares,
            [Put(key, to_json(record))],
            [Get(keys.entitlement(ent)), Get(keys.entitlement_deletion(ent)), Get(key)],
        )
        if written.succeeded:
            return record
        if written.kv(0) is None:
            raise NotFound(f"entitlement '{ent}' does not exist")
        if written.kv(1) is not None:
            raise Conflict(f"entitlement '{ent}' is being deleted")
        found = records.record_of(EphemeralResource, written.kv(2))
    raise Conflict(
        f"ephemeral resource '{ent}/{label}' or the entitlement's placements kept changing "
        f"over {_ATTEMPTS} attempts; try again"
    )


async def _check_targets(store: Store, cache: StoreCache, wanted: SetResourceRequest) -> None:
    machine = wanted.node_spec.machine
    if machine is not None:
        known = await records.get_confirmed(store, cache, keys.machine(machine), Machine)
        if known is None:
            unknown = {"loc": ("node_spec", "machine"), "msg": f"unknown machine '{machine}'"}
            raise validation_problem([unknown])
    owner = wanted.owner_job
    if owner is not None:
        job = await records.get_confirmed(
            store, cache, keys.job(wanted.entitlement, owner), Job, lambda job: not job.deleting
        )
        if job is None or job.model.deleting:
            gone = " (it is being deleted)" if job is not None else ""
            message = f"job '{wanted.entitlement}/{owner}' does not exist{gone}"
            raise validation_problem([{"loc": ("owner_job",), "msg": message}])


def _updated(
    current: EphemeralResource | None,
    wanted: SetResourceRequest,
    grant: ResourceGrant,
    now: datetime,
) -> EphemeralResource:
    """The record with the grant set: the owner and expiry given replace the old ones; an
    expired record is replaced whole."""
    expires_at = None if wanted.ttl_s is None else now + timedelta(seconds=wanted.ttl_s)
    try:
        if current is None or current.expired(now):
            return EphemeralResource(
                entitlement=wanted.entitlement,
                label=wanted.label,
                grants=[grant],
                owner_job=wanted.owner_job,
                expires_at=expires_at,
                created_at=now,
                updated_at=now,
            )
        updated = current.with_grant(grant, now)
    except ValidationError as exc:
        raise validation_problem(exc.errors()) from None
    return updated.model_copy(
        update={
            "owner_job": wanted.owner_job or current.owner_job,
            "expires_at": expires_at or current.expires_at,
        }
    )


def _may_lower(current: EphemeralResource, grant: ResourceGrant) -> bool:
    """Whether setting `grant` may lower the label's capacity on some machine: not when it
    names a machine with no grant of its own and no broad grant exists, nor when it raises
    the grant of its node_spec without changing which grant wins where."""
    spec = grant.node_spec
    if spec.machine is not None:
        before = current.machine_grants().get(spec.machine)
        if before is None:
            return bool(current.broad_grants())
        return grant.capacity < before
    broad = current.broad_grants()
    # Set again, a broad grant moves last: only the last one keeps its precedence.
    return not (broad and broad[-1].node_spec == spec and grant.capacity >= broad[-1].capacity)


async def _refuse_over_holding(
    allocators: Allocators, record: EphemeralResource, fenced_at: int
) -> None:
    request = allocator_pb2.EphemeralStateRequest(
        entitlement=record.entitlement,
        records=[to_json(record)],
        over_held=True,
        min_revision=fenced_at,
    )
    what = f"ephemeral resource '{record.entitlement}/{record.label}'"
    response = await _ephemeral_state(
        allocators, request, f"check what running tasks hold of {what}"
    )
    over = [machine for label in response.labels for machine in label.machines]
    if over:
        lines = "; ".join(
            f"{m.machine_id}: capacity {m.capacity}, held {m.held} by {', '.join(m.tasks)}"
            for m in over[:10]
        )
        more = f" (and {len(over) - 10} more machines)" if len(over) > 10 else ""
        raise Conflict(
            f"lowering {what} would leave running tasks holding more than its capacity: "
            f"{lines}{more}; stop those tasks first, or lower it once they finish"
        )


async def resource_views(
    allocators: Allocators, found: Sequence[EphemeralResource], limit: int
) -> list[ResourceView]:
    """Each record with its machines, as an allocator counts them (`found` in key order)."""
    views: list[ResourceView] = []
    for entitlement, group in groupby(found, key=lambda record: record.entitlement):
        batch = list(group)
        request = allocator_pb2.EphemeralStateRequest(
            entitlement=entitlement, records=[to_json(record) for record in batch], limit=limit
        )
        response = await _ephemeral_state(allocators, request, "read the cluster state")
        for record, label in zip(batch, response.labels, strict=True):
            machines = [
                MachineShareView(
                    machine=m.machine_id,
                    capacity=m.capacity,
                    held=m.held,
                    free=max(m.capacity - m.held, 0),
                )
                for m in label.machines
            ]
            views.append(
                ResourceView(resource=record, machines=machines, machines_truncated=label.truncated)
            )
    return views


async def _ephemeral_state(
    allocators: Allocators, request: allocator_pb2.EphemeralStateRequest, doing: str
) -> allocator_pb2.EphemeralStateResponse:
    try:
        return await allocators.ephemeral_state(request)
    except AllocatorUnavailable as exc:
        raise Unavailable(f"cannot {doing}: {exc}") from None
    except AllocatorRefused as exc:
        raise refusal_problem(exc) from None


async def delete_resource(store: Store, entitlement: str, label: str) -> EphemeralResource:
    """Deletes the label, answering with its record. Running tasks keep what they hold; no
    more are placed on it."""
    key = keys.ephemeral_resource(entitlement, label)
    found = await records.get(store, key, EphemeralResource)
    if found is None:
        raise NotFound(f"ephemeral resource '{entitlement}/{label}' does not exist")
    await store.txn([], [Delete(key)])
    return found.model
