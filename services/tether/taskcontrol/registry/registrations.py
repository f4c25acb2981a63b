"""Registering, renewing, removing and listing TaskController registrations in the store."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import ValidationError

from tether.model import (
    ControllerRegistration,
    Entitlement,
    PrincipalRecord,
    check_name,
    from_json,
    parse_job_handle,
    to_json,
    token_digest,
)
from tether.store import KeyValue, LeaseNotFound, Put, Store, keys, mod_revision_is


class RegistryError(Exception):
    """A request the registry refuses; the message says why, for the caller to act on."""


class Unauthenticated(RegistryError):
    """No bearer token, or one the region does not know."""


class PermissionDenied(RegistryError):
    """The principal may not act on this entitlement."""


class NotFound(RegistryError):
    """The entitlement or registration does not exist (or has expired)."""


class InvalidArgument(RegistryError):
    """The request is malformed: no scope, a bad endpoint, a bad job handle."""


@dataclass(frozen=True, slots=True)
class Scope:
    """What a registration covers: one job of an entitlement, or all of its jobs."""

    entitlement: str
    job: str | None = None

    @classmethod
    def of(cls, *, job_handle: str = "", entitlement: str = "") -> Scope:
        if bool(job_handle) == bool(entitlement):
            raise InvalidArgument("name exactly one scope: a job handle or an entitlement")
        if job_handle:
            try:
                entitlement_name, _ = parse_job_handle(job_handle)
            except ValueError as error:
                raise InvalidArgument(str(error)) from error
            return cls(entitlement_name, job_handle)
        try:
            return cls(check_name(entitlement, "entitlement"))
        except ValueError as error:
            raise InvalidArgument(str(error)) from error


class Registrations:
    """The registry's rules over the store: a registration lives on a lease of its own, so it
    lapses by itself when nobody renews it, whatever happens to the registry's processes."""

    def __init__(self, store: Store, *, default_ttl_s: int, max_ttl_s: int) -> None:
        self._store = store
        self.default_ttl_s = default_ttl_s
        self.max_ttl_s = max_ttl_s

    async def principal(self, token: str) -> PrincipalRecord:
        """The principal of a bearer token."""
        if not token:
            raise Unauthenticated("send the metadata 'authorization: Bearer <token>'")
        kv = await self._store.get(keys.principal(token_digest(token)))
        if kv is None:
            raise Unauthenticated("the bearer token is not known to this region")
        return from_json(PrincipalRecord, kv.value, stored=True)

    async def register(
        self, principal: PrincipalRecord, scope: Scope, endpoint: str, ttl_s: int
    ) -> ControllerRegistration:
        await self._authorize(principal, scope.entitlement)
        granted = self._granted(ttl_s)
        lease = await self._store.lease_grant(granted)
        try:
            registration = ControllerRegistration(
                id=uuid.uuid4().hex,
                entitlement=scope.entitlement,
                job=scope.job,
                endpoint=endpoint,
                principal=principal.name,
                ttl_s=granted,
                lease=lease,
                expires_at=_expiry(granted),
            )
        except ValidationError as error:
            await self._store.lease_revoke(lease)
            raise InvalidArgument(_first_error(error)) from error
        await self._store.put(keys.controller(registration.id), to_json(registration), lease=lease)
        return registration

    async def renew(
        self, principal: PrincipalRecord, registration_id: str
    ) -> ControllerRegistration:
        kv = await self._read(registration_id)
        if kv is None:
            raise NotFound(f"registration '{registration_id}' does not exist or has expired")
        key = kv.key
        registration = from_json(ControllerRegistration, kv.value, stored=True)
        await self._authorize(principal, registration.entitlement)
        try:
            await self._store.lease_keepalive(registration.lease)
        except LeaseNotFound as error:
            raise NotFound(f"registration '{registration_id}' has expired") from error
        renewed = registration.model_copy(update={"expires_at": _expiry(registration.ttl_s)})
        # A registration removed meanwhile stays removed: the write compares the one renewed.
        await self._store.txn(
            [mod_revision_is(key, kv.mod_revision)],
            [Put(key, to_json(renewed), registration.lease)],
        )
        return renewed

    async def unregister(self, principal: PrincipalRecord, registration_id: str) -> None:
        kv = await self._read(registration_id)
        if kv is None:
            return
        registration = from_json(ControllerRegistration, kv.value, stored=True)
        await self._authorize(principal, registration.entitlement)
        # Revoking the lease deletes the key with it.
        await self._store.lease_revoke(registration.lease)

    async def list(
        self, principal: PrincipalRecord, entitlement: str = ""
    ) -> list[ControllerRegistration]:
        """Live registrations the principal may see (of `entitlement` only, when named)."""
        visible: dict[str, bool] = {}
        found = []
        for kv in (await self._store.range(keys.CONTROLLERS)).kvs:
            try:
                registration = from_json(ControllerRegistration, kv.value, stored=True)
            except ValidationError:
                continue
            if entitlement and registration.entitlement != entitlement:
                continue
            name = registration.entitlement
            if name not in visible:
                visible[name] = principal.is_admin or await self._may_use(principal, name)
            if visible[name]:
                found.append(registration)
        return sorted(found, key=lambda registration: registration.id)

    async def _read(self, registration_id: str) -> KeyValue | None:
        # An id with '/' would address another key of the prefix.
        if not registration_id or "/" in registration_id:
            return None
        return await self._store.get(keys.controller(registration_id))

    def _granted(self, ttl_s: int) -> int:
        if ttl_s < 0:
            raise InvalidArgument(f"ttl_seconds must not be negative, got {ttl_s}")
        return min(ttl_s or self.default_ttl_s, self.max_ttl_s)

    async def _authorize(self, principal: PrincipalRecord, entitlement: str) -> None:
        kv = await self._store.get(keys.entitlement(entitlement))
        if kv is None:
            raise NotFound(f"entitlement '{entitlement}' does not exist")
        if not principal.may_use(from_json(Entitlement, kv.value, stored=True)):
            raise PermissionDenied(
                f"principal '{principal.name}' is not a member of entitlement '{entitlement}'"
            )

    async def _may_use(self, principal: PrincipalRecord, entitlement: str) -> bool:
        try:
            await self._authorize(principal, entitlement)
        except RegistryError:
            return False
        return True


def _expiry(ttl_s: int) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=ttl_s)


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]
