"""Frontend answers the SDK and CLI unit tests share, each with every field the frontend sends."""

from __future__ import annotations

import json
from typing import Any

import httpx

JOB: dict[str, Any] = {
    "handle": "team-a/web",
    "entitlement": "team-a",
    "name": "web",
    "count": 2,
    "generation": 1,
    "deleting": False,
    "created_at": "2025-01-02T03:04:05Z",
    "updated_at": "2025-01-02T03:04:05Z",
    "spec": {
        "name": "web",
        "entitlement": "team-a",
        "count": 2,
        "kind": "service",
        "task": {
            "package": "hello",
            "version": "1.0",
            "command": "python",
            "args": ["-m", "http.server"],
        },
    },
    "tasks": {"running": 1, "pending": 1},
    "running": 1,
    "some_future_field": {"ignored": True},
}
"""A JobView as the frontend sends it, plus a field a newer frontend might add."""


def task(index: int, state: str, machine: str | None = None, message: str = "") -> dict[str, Any]:
    """A TaskView of team-a/web; a running task has a pid."""
    return {
        "task_id": f"team-a/web/{index}",
        "index": index,
        "state": state,
        "desired": "running",
        "machine": machine,
        "attempt": 1 if machine else 0,
        "restarts": 0,
        "generation": 1,
        "version": "1.0",
        "pid": 1000 + index if state == "running" else None,
        "exit_code": None,
        "message": message,
        "started_at": "2025-01-02T03:04:06Z" if state == "running" else None,
        "updated_at": "2025-01-02T03:04:06Z",
    }


def machine(
    machine_id: str, state: str = "up", heartbeat: bool = True, cpu: int = 0, memory: int = 0
) -> dict[str, Any]:
    """A MachineView of a free-pool machine of 4 cores and 4 GiB whose tasks hold `cpu`
    millicores and `memory` MiB, 500 millicores each."""
    return {
        "id": machine_id,
        "hostname": machine_id,
        "topology": {"region": "local", "dc": "dc1", "msb": "msb2", "rack": "r3"},
        "hardware_type": "std",
        "attributes": {},
        "state": state,
        "entitlement": None,
        "host_profile": None,
        "host_profile_current": None,
        "capacity": {"cpu": 4000, "memory_mib": 4096, "disk_gib": 20, "gpus": 0, "extra": {}},
        "allocated": {"cpu": cpu, "memory_mib": memory, "disk_gib": 0, "gpus": 0, "extra": {}},
        "free": {"cpu": 4000 - cpu, "memory_mib": 4096 - memory, "disk_gib": 20},
        "tasks": cpu // 500,
        "heartbeat": heartbeat,
    }


def shard(name: str, leader: str | None = None, **changes: Any) -> dict[str, Any]:
    """A ShardDetail without entitlements, led by `leader` (None: nobody)."""
    since = "2025-01-02T03:04:05Z" if leader else None
    return {
        "shard": name,
        "draining": False,
        "leader": leader,
        "leader_pid": 1 if leader else None,
        "leader_since": since,
        "lease_expires_at": since,
        "standbys": [],
        "last_reconcile_at": since,
        "reconciles": 1 if leader else None,
        "backlog": 0 if leader else None,
        "reported_at": since,
        "entitlements": [],
        "jobs": 0,
        "tasks": 0,
        "machines": 0,
        "operations": 0,
        "warning": None,
    } | changes


def region(**changes: Any) -> dict[str, Any]:
    """A RegionView of an empty region named local; `machines` changes only the counts given."""
    counts = dict.fromkeys(("total", "up", "draining", "maintenance", "down", "decommissioned"), 0)
    return (
        {
            "name": "local",
            "shards": [],
            "allocators": [],
            "jobs": 0,
            "tasks": {},
        }
        | changes
        | {"machines": counts | changes.get("machines", {})}
    )


def problem(status: int, title: str, detail: str = "", **extra: object) -> httpx.Response:
    """A problem+json error response; `extra` adds or overrides members (e.g. `errors`)."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return httpx.Response(
        status, content=json.dumps(body), headers={"content-type": "application/problem+json"}
    )
