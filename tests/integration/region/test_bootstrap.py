"""Bootstrapping a region is idempotent and keeps what a resumed region already has."""

from __future__ import annotations

import stat
from pathlib import Path

from tether.model import (
    Entitlement,
    PrincipalRecord,
    Quota,
    RegionConfig,
    Resources,
    from_json,
    token_digest,
)
from tether.region.bootstrap import bootstrap_region
from tether.store import Store, keys


async def test_bootstrap_creates_once_and_resumes(store: Store, tmp_path: Path) -> None:
    token_file = tmp_path / "admin.token"
    default = Entitlement(name="default", quota=Quota(resources=Resources(cpu=1000)))
    first = await bootstrap_region(
        store,
        name="r1",
        shards=["s0", "s1"],
        admin_token_file=token_file,
        default_entitlement=default,
        non_preemptible_priority=900,
    )
    assert first.created
    assert first.config.non_preemptible_priority == 900
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    principal = await store.get(keys.principal(token_digest(token)))
    assert principal is not None
    assert from_json(PrincipalRecord, principal.value).is_admin
    shard = await store.get(keys.shard_assignment("default"))
    assert shard is not None
    assert shard.value in (b"s0", b"s1")

    changed = Entitlement(name="default", quota=Quota(resources=Resources(cpu=5)))
    second = await bootstrap_region(
        store,
        name="other",
        shards=["x"],
        admin_token_file=token_file,
        default_entitlement=changed,
        non_preemptible_priority=100,
    )
    assert not second.created
    assert second.config.shards == ["s0", "s1"]
    assert second.config.non_preemptible_priority == 900
    stored_config = await store.get(keys.region_config())
    assert stored_config is not None
    assert from_json(RegionConfig, stored_config.value).name == "r1"
    assert token_file.read_text().strip() == token
    entitlement = await store.get(keys.entitlement("default"))
    assert entitlement is not None
    assert from_json(Entitlement, entitlement.value).quota.resources.cpu == 1000
