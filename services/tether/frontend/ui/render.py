"""Pages from the templates: one Jinja2 environment, and the filters the templates share."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

from tether.model import PrincipalRecord

_ENVIRONMENT: Final = Environment(
    loader=PackageLoader("tether.frontend.ui", "templates"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def ago(moment: datetime | None) -> str:
    """e.g. "12s ago", "5m ago", "3h ago"; "-" for nothing."""
    if moment is None:
        return "-"
    seconds = int((datetime.now(UTC) - moment).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    if seconds < 86400:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def counts(by_state: dict[str, int]) -> str:
    """e.g. "running 3, pending 1"."""
    ordered = sorted(by_state.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{state} {count}" for state, count in ordered if count) or "-"


_ENVIRONMENT.filters["ago"] = ago
_ENVIRONMENT.filters["counts"] = counts


def page(
    template: str, principal: PrincipalRecord | None, status: int = 200, **context: Any
) -> HTMLResponse:
    """`template` rendered with `context` and who is logged in."""
    html = _ENVIRONMENT.get_template(template).render(principal=principal, **context)
    return HTMLResponse(html, status_code=status)
