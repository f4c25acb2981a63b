"""Entitlement writes after creation: replace one (its tree checked again) and delete one that
holds nothing."""

from __future__ import annotations

import contextlib
from typing import Final

from tether.frontend import records
from tether.frontend.admission import check_tree
from tether.frontend.problems import Conflict, NotFound, some_names, validation_problem
from tether.model import Entitlement, Job, to_json
from tether.model.admission import Admission
from tether.store import (
    Compare,
    Delete,
    Put,
    Store,
    StoreError,
    key_missing,
    keys,
    mod_revision_is,
)

_DELETION_LEASE_S: Final = 30
"""How long a deletion's marker outlives a frontend that died while deleting."""


async def replace(store: Store, name: str, candidate: Entitlement) -> Entitlement:
    """Replace entitlement `name` with `candidate` (same name; the shard stays): 404 unknown,
    422 naming the field when it does not fit its tree (a cycle of parents, children's quotas
    beyond its own, its family's beyond its parent's, a borrowing limit beyond its parent)."""
    if candidate.name != name:
        raise validation_problem(
            [{"loc": ("name",), "msg": f"must be '{name}', the entitlement replaced"}]
        )
    current = await records.get(store, keys.entitlement(name), Entitlement)
    if current is None:
        raise NotFound(f"entitlement '{name}' does not exist")
    existing = await records.scan(store, keys.ENTITLEMENTS, Entitlement)
    check_tree(existing, candidate)
    compares: list[Compare] = [mod_revision_is(current.kv.key, current.kv.mod_revision)]
    if candidate.parent is not None:
        parent = await store.get(keys.entitlement(candidate.parent))
        if parent is None:
            raise Conflict(f"entitlement '{candidate.parent}' changed meanwhile; try again")
        compares.append(mod_revision_is(parent.key, parent.mod_revision))
        compares.append(key_missing(keys.entitlement_deletion(candidate.parent)))
    result = await store.txn(compares, [Put(current.kv.key, to_json(candidate))])
    if not result.succeeded:
        raise Conflict(f"entitlement '{name}' or its parent changed meanwhile; try again")
    return candidate


async def delete(store: Store, name: str, principal: str) -> tuple[Entitlement, int]:
    """Delete entitlement `name` with its shard-map entry and its tree's records; 404 unknown,
    409 naming its children or its jobs (queued or not) while it has any. Returns it and the
    revision of the deletion.

    A marker on a short lease (`entitlement-deletions/<name>`) is put before the jobs and
    children are looked for: a submission or a child that compares the marker missing either
    committed before it (and is found) or fails. The lease ends it should this process die."""
    current = await records.get(store, keys.entitlement(name), Entitlement)
    if current is None:
        raise NotFound(f"entitlement '{name}' does not exist")
    marker = keys.entitlement_deletion(name)
    lease = await store.lease_grant(_DELETION_LEASE_S)
    try:
        marked = await store.txn(
            [mod_revision_is(current.kv.key, current.kv.mod_revision), key_missing(marker)],
            [Put(marker, principal.encode(), lease=lease)],
        )
        if not marked.succeeded:
            raise Conflict(f"entitlement '{name}' changed or is being deleted meanwhile; try again")
        await _refuse_if_used(store, name)
        result = await store.txn(
            [
                mod_revision_is(current.kv.key, current.kv.mod_revision),
                mod_revision_is(marker, marked.revision),
            ],
            [
                Delete(current.kv.key),
                Delete(keys.shard_assignment(name)),
                Delete(keys.quota_fence(name)),
                Delete(keys.quota_ledger(name)),
                Delete(keys.queue_status(name)),
                Delete(keys.admissions_of(name), prefix=True),
                Delete(keys.throughput_profiles_of(name), prefix=True),
                Delete(keys.accelerator_report(name)),
                Delete(keys.ephemeral_resources_of(name), prefix=True),
                Delete(marker),
            ],
        )
    finally:
        with contextlib.suppress(StoreError):
            await store.lease_revoke(lease)
    if not result.succeeded:
        raise Conflict(f"entitlement '{name}' changed meanwhile; try again")
    return current.model, result.revision


async def _refuse_if_used(store: Store, name: str) -> None:
    """409 naming the entitlement's children or jobs, if it has any."""
    existing = await records.scan(store, keys.ENTITLEMENTS, Entitlement)
    children = sorted(e.name for e in existing if e.parent == name)
    if children:
        raise Conflict(
            f"entitlement '{name}' has {len(children)} child entitlement(s): "
            f"{some_names(children)}; delete or re-parent them first"
        )
    jobs = await records.scan(store, keys.jobs_of(name), Job)
    if jobs:
        admissions = await records.scan(store, keys.admissions_of(name), Admission)
        states = {record.job: record.state.value for record in admissions}
        named = [f"{job.handle} ({states.get(job.handle, 'running')})" for job in jobs]
        raise Conflict(
            f"entitlement '{name}' has {len(jobs)} job(s): {some_names(named)}; delete them first"
        )
