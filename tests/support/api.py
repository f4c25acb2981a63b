"""Frontend answers shared by the SDK and CLI unit tests: a problem+json and a job view."""

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


def problem(status: int, title: str, detail: str = "", **extra: object) -> httpx.Response:
    """A problem+json error response; `extra` adds or overrides members (e.g. `errors`)."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}
    return httpx.Response(
        status, content=json.dumps(body), headers={"content-type": "application/problem+json"}
    )
