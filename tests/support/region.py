"""A region as `tether up` creates it, for tests: its config in the store (services refuse a
store without one), and its region file (`.tether/region.json`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from tether.model import (
    DEFAULT_FENCING_S,
    REGION_FILE_NAME,
    RegionConfig,
    RegionState,
    from_json,
    to_json,
    write_region_state,
)
from tether.store import Store, keys


async def create_region(
    store: Store, shards: Sequence[str] = ("shard-0",), *, fencing_s: float = DEFAULT_FENCING_S
) -> RegionConfig:
    config = RegionConfig(
        name="test", shards=list(shards), fencing_s=fencing_s, created_at=datetime.now(UTC)
    )
    await store.put(keys.region_config(), to_json(config))
    return config


def region_file_fields(state_dir: Path) -> dict[str, object]:
    """The region file of a small region in `state_dir`, as JSON values: every field `tether up`
    writes, with the names it writes them under."""
    command = ["python", "-m", "tether.cli.services"]
    return {
        "pid": 4242,
        "url": "http://127.0.0.1:18080",
        "urls": ["http://127.0.0.1:18080"],
        "docs_url": "http://127.0.0.1:18080/docs",
        "registry_address": "127.0.0.1:18081",
        "admin_token_file": str(state_dir / "admin.token"),
        "ca_file": None,
        "store": f"sqlite:///{state_dir / 'store.db'}",
        "etcd_pid": 0,
        "logs": str(state_dir / "logs"),
        "started_at": "2026-11-25T10:00:00.000000+00:00",
        "metrics": {"health": "http://127.0.0.1:19100/metrics"},
        "commands": {"frontend": [*command, "frontend"], "health": [*command, "health"]},
        "processes": {"frontend": 4300, "health": 4301},
        "restarts": {"frontend": 0, "health": 0},
        "dead": [],
    }


def write_region_file(state_dir: Path, **fields: object) -> RegionState:
    """Writes the region file `tether up` would write in `state_dir`, with `fields` (JSON
    values) in place of the defaults of `region_file_fields`; returns what it holds."""
    state_dir.mkdir(parents=True, exist_ok=True)
    state = from_json(RegionState, json.dumps(region_file_fields(state_dir) | fields))
    write_region_state(state_dir / REGION_FILE_NAME, state)
    return state
