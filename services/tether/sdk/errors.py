"""Errors the Tether client raises: API problems (read from their problem+json), and a region
that cannot be reached."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx


class TetherError(Exception):
    """Base of every error the client raises."""


@dataclass(frozen=True)
class FieldError:
    """One validation error of a request: where (`loc`, dotted) and what is wrong."""

    loc: str
    msg: str


class TetherAPIError(TetherError):
    """The API answered with an error status (or with a body the client cannot read)."""

    def __init__(
        self, status: int, title: str, detail: str = "", errors: list[FieldError] | None = None
    ) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors or []
        message = f"{status} {title}"
        super().__init__(f"{message}: {detail}" if detail else message)


class TetherConnectionError(TetherError):
    """The frontend at `url` could not be reached or did not answer in time."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        if "CERTIFICATE_VERIFY_FAILED" in reason:
            message = (
                f"cannot trust the Tether frontend at {url} ({reason}); set TETHER_CA_FILE to "
                "the region's CA certificate (ca.pem of tether certs init)."
            )
        else:
            message = (
                f"cannot reach the Tether frontend at {url} ({reason}); is the region running? "
                "Start one with scripts/up, or point --url / TETHER_URL at a frontend (https:// "
                "for a region that serves TLS)."
            )
        super().__init__(message)


def problem_error(response: httpx.Response) -> TetherAPIError:
    """The TetherAPIError an error response describes, read from its problem+json body when it
    has one; other bodies (a proxy's HTML page, FastAPI's `{"detail": ...}`) still give a
    readable message."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return TetherAPIError(response.status_code, response.reason_phrase, response.text[:300])
    title = body.get("title")
    detail = body.get("detail")
    return TetherAPIError(
        response.status_code,
        title if isinstance(title, str) and title else response.reason_phrase,
        detail if isinstance(detail, str) else json.dumps(detail) if detail else "",
        _field_errors(body.get("errors")),
    )


def _field_errors(errors: Any) -> list[FieldError]:
    if not isinstance(errors, list):
        return []
    fields = []
    for error in errors:
        if not isinstance(error, dict):
            continue
        loc = error.get("loc", "")
        where = ".".join(str(part) for part in loc) if isinstance(loc, list) else str(loc)
        fields.append(FieldError(where, str(error.get("msg", ""))))
    return fields
