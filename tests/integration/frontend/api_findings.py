"""What schemathesis finds in the REST API on purpose: the rules JSON Schema cannot state.

A request the schema allows may still be refused with 422 when it breaks a rule between
fields, against the clock or against what the store holds. Each rule here is said in the
description of its field in the schema and listed in docs/protocol.md ("What the schema cannot
say"); the API property pass lets a 422 through only when every error it names is one of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from tether.frontend.app import openapi_document

ENTITLEMENT_WRITES: Final = ("POST /v1/entitlements", "PUT /v1/entitlements/{name}")
CACHED_READS: Final = tuple(
    f"GET {path}"
    for path, methods in openapi_document()["paths"].items()
    if any(
        parameter["name"] == "min_revision"
        for parameter in methods.get("get", {}).get("parameters", [])
    )
)
"""The GETs answered from the frontend's cache, which take `min_revision`."""
SCALE: Final = ("POST /v1/jobs/{ent}/{job}/scale",)


@dataclass(frozen=True)
class Intended:
    """A rule of `field` (its path in the body, `*` for any list index) that refuses a
    schema-valid body of `operations` with a message matching `message`. The description of
    `described` (default `field`), or of an object holding it, says so."""

    operations: tuple[str, ...]
    field: str
    message: str
    kind: str
    """Across fields, against the clock, or against the store."""
    described: str | None = None

    def covers(self, operation: str, loc: list[str | int], msg: str) -> bool:
        path = ".".join("*" if isinstance(part, int) else str(part) for part in loc)
        return (
            operation in self.operations
            and path == self.field
            and re.match(self.message, msg) is not None
        )


ACCELERATOR: Final = (
    "scale_factor .* must be the job's count|an accelerator job's gang runs whole"
    "|each task of an accelerator job asks for exactly 1 GPU"
)
ACROSS_FIELDS: Final = "across fields"
CLOCK: Final = "against the clock"
STORE: Final = "against the store"

INTENDED: Final = (
    Intended(
        ENTITLEMENT_WRITES, "parent", "an entitlement cannot be its own parent", ACROSS_FIELDS
    ),
    Intended(
        ENTITLEMENT_WRITES,
        "borrowing_limit",
        "only an entitlement with a parent can borrow",
        ACROSS_FIELDS,
    ),
    Intended(
        ENTITLEMENT_WRITES, "lending_limit", "cannot lend more than its own quota", ACROSS_FIELDS
    ),
    Intended(
        ("PUT /v1/entitlements/{name}",), "name", "must be '.*', the entitlement", ACROSS_FIELDS
    ),
    Intended(
        ENTITLEMENT_WRITES,
        "parent",
        "no entitlement is named|would make a cycle of parents",
        STORE,
    ),
    Intended(
        ENTITLEMENT_WRITES,
        "quota.resources",
        "its children .* are guaranteed more|the children of .* would be guaranteed more",
        STORE,
    ),
    Intended(ENTITLEMENT_WRITES, "borrowing_limit", "quota plus borrowing limit exceed", STORE),
    Intended(CACHED_READS, "min_revision", "is newer than the store's revision", STORE),
    Intended(("GET /v1/events",), "since", "is after the store's revision", STORE),
    Intended(("GET /v1/events",), "last-event-id", "is after the store's revision", STORE),
    Intended(("POST /v1/jobs",), "min_count", "must be at most count", ACROSS_FIELDS),
    Intended(("POST /v1/jobs",), "accelerator", ACCELERATOR, ACROSS_FIELDS),
    Intended(
        ("POST /v1/jobs",),
        "task.restart.backoff_max_s",
        "must be at least backoff_initial_s",
        ACROSS_FIELDS,
    ),
    Intended(("POST /v1/jobs",), "deadline", "is in the past", CLOCK),
    Intended(("POST /v1/maintenance",), "start", "is in the past", CLOCK),
    # The job's spec with the new count, or the new suspension.
    Intended(SCALE, "min_count", "must be at most count", STORE, described="count"),
    Intended(SCALE, "accelerator", ACCELERATOR, STORE, described="count"),
    Intended(
        ("PATCH /v1/jobs/{ent}/{job}",), "suspended", "only batch jobs may be suspended", STORE
    ),
    Intended(("POST /v1/jobs/{ent}/{job}/operations",), "tasks", "job .* has tasks 0-", STORE),
    Intended(("POST /v1/resources",), "node_spec.machine", "unknown machine", STORE),
    Intended(("POST /v1/resources",), "owner_job", "job .* does not exist", STORE),
    Intended(
        ("POST /v1/resources",),
        "grants",
        "List should have at most 1024 items",
        STORE,
        described="node_spec",
    ),
)


def documented_refusal(operation: str, status: int, problem: Any) -> bool:
    """Whether a 422 `problem` answering `operation` names only INTENDED rules."""
    if status != 422 or not isinstance(problem, dict):
        return False
    errors = problem.get("errors")
    if not isinstance(errors, list) or not errors:
        return False
    return all(
        any(rule.covers(operation, error["loc"], error["msg"]) for rule in INTENDED)
        for error in errors
    )
