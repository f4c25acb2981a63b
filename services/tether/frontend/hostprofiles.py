"""Host profile writes: creation, and deletion refused while anything uses the profile."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tether.frontend import records
from tether.frontend.problems import Conflict, NotFound, some_names
from tether.model import Entitlement, HostProfile, Machine, to_json
from tether.store import Delete, Put, Store, key_missing, keys, mod_revision_is


@dataclass(frozen=True, slots=True)
class ProfileUsers:
    """What uses a host profile: entitlements that name it, machines whose agent carries it,
    and machines whose allocation record asks for it (they switch to it or already did)."""

    entitlements: list[str]
    carried_by: list[str]
    targeted_by: list[str]

    def __bool__(self) -> bool:
        return bool(self.entitlements or self.carried_by or self.targeted_by)

    def describe(self) -> str:
        """`entitlement(s) a, b; machine(s) m1 carry it; ...`, naming the first few of each."""
        parts = [
            f"{what} {some_names(users)}{how}"
            for what, users, how in (
                ("entitlement(s)", self.entitlements, " name it"),
                ("machine(s)", self.carried_by, " carry it"),
                ("the allocation record(s) of machine(s)", self.targeted_by, " ask for it"),
            )
            if users
        ]
        return "; ".join(parts)


async def create(store: Store, profile: HostProfile) -> None:
    """Store a new profile; 409 if one of that name exists (a profile is never replaced: the
    machines that carry it switched to its settings as they were)."""
    key = keys.host_profile(profile.name)
    created = await store.txn([key_missing(key)], [Put(key, to_json(profile))])
    if not created.succeeded:
        raise Conflict(f"host profile '{profile.name}' already exists")


async def users(store: Store, name: str) -> ProfileUsers:
    """Every entitlement, machine and allocation record that uses the profile `name`."""
    entitlements, machines, allocations = await asyncio.gather(
        records.scan(store, keys.ENTITLEMENTS, Entitlement),
        records.scan(store, keys.MACHINES, Machine),
        records.allocations(store),
    )
    return ProfileUsers(
        entitlements=[ent.name for ent in entitlements if ent.host_profile == name],
        carried_by=[machine.id for machine in machines if machine.host_profile_current == name],
        targeted_by=[
            machine_id
            for machine_id, allocation in allocations.items()
            if allocation.record is not None and allocation.record.host_profile == name
        ],
    )


async def delete(store: Store, name: str) -> HostProfile:
    """Delete the profile; 404 if there is none, 409 naming its users while anything uses it.

    A user that appears after the check (an entitlement created naming the profile, and the
    allocation records and machines that follow it) is not stopped, and no transaction could
    stop it: an entitlement may name a profile that has no record, and the agent then switches
    to it with no settings (docs/protocol.md, "Host profile switches"), so the region is left
    in a state it already handles. The check is there to stop an admin's mistake, not to keep
    an invariant. The compare deletes only the record that was checked, not one created again
    meanwhile.
    """
    key = keys.host_profile(name)
    found = await records.get(store, key, HostProfile)
    if found is None:
        raise NotFound(f"host profile '{name}' does not exist")
    in_use = await users(store, name)
    if in_use:
        raise Conflict(f"host profile '{name}' is in use: {in_use.describe()}")
    deleted = await store.txn([mod_revision_is(key, found.kv.mod_revision)], [Delete(key)])
    if not deleted.succeeded:
        raise Conflict(f"host profile '{name}' was deleted or created again meanwhile; try again")
    return found.model
