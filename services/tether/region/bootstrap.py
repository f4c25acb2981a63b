"""Creating a region's first records: its shards, the admin principal and a default entitlement."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tether.model import (
    DEFAULT_FENCING_S,
    DEFAULT_NON_PREEMPTIBLE_PRIORITY,
    Entitlement,
    PrincipalRecord,
    RegionConfig,
    Role,
    from_json,
    new_token,
    shard_for,
    to_json,
    token_digest,
)
from tether.store import Put, Store, key_missing, keys

ADMIN_PRINCIPAL = "admin"


@dataclass(frozen=True)
class BootstrapResult:
    """What the region looks like after bootstrapping."""

    config: RegionConfig
    created: bool
    """False when the region already existed (a resumed region)."""


async def bootstrap_region(
    store: Store,
    *,
    name: str,
    shards: list[str],
    admin_token_file: Path,
    default_entitlement: Entitlement,
    fencing_s: float = DEFAULT_FENCING_S,
    non_preemptible_priority: int = DEFAULT_NON_PREEMPTIBLE_PRIORITY,
) -> BootstrapResult:
    """Makes sure the region's config, admin principal and default entitlement exist.

    Idempotent: a resumed region keeps its config (its shard list included) and entitlements;
    only what is missing is created. The admin token is read from `admin_token_file`, or
    created there (mode 0600) when the file does not exist.
    """
    config = RegionConfig(
        name=name,
        shards=shards,
        fencing_s=fencing_s,
        non_preemptible_priority=non_preemptible_priority,
        created_at=datetime.now(UTC),
    )
    created = await store.create(keys.region_config(), to_json(config))
    if not created:
        stored = await store.get(keys.region_config())
        assert stored is not None, "the region config cannot vanish: nothing deletes it"
        config = from_json(RegionConfig, stored.value, stored=True)

    token = _read_or_create_token(admin_token_file)
    admin = PrincipalRecord(name=ADMIN_PRINCIPAL, roles=[Role.ADMIN])
    await store.put(keys.principal(token_digest(token)), to_json(admin))

    entitlement_key = keys.entitlement(default_entitlement.name)
    shard_key = keys.shard_assignment(default_entitlement.name)
    await store.txn(
        (key_missing(entitlement_key), key_missing(shard_key)),
        (
            Put(entitlement_key, to_json(default_entitlement)),
            Put(shard_key, shard_for(default_entitlement.name, config.shards).encode()),
        ),
    )
    return BootstrapResult(config=config, created=created)


def _read_or_create_token(path: Path) -> str:
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = new_token()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(token + "\n")
    return token
