"""Errors the Tether client raises: API problems, and a region that cannot be reached."""

from __future__ import annotations

from dataclasses import dataclass


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
        super().__init__(
            f"cannot reach the Tether frontend at {url} ({reason}); is the region running? "
            "Start one with scripts/up, or point --url / TETHER_URL at a frontend."
        )
