"""`tether frontend`: run the REST API (docs/protocol.md, "The frontend's REST API")."""

from __future__ import annotations

from typing import Any

import typer

from tether.cli.serving import LogLevel, load_settings, serve
from tether.cli.store import StoreUrl
from tether.frontend.service import Frontend
from tether.frontend.settings import FrontendSettings


def frontend(
    host: str | None = typer.Option(
        None, "--host", help="Address to listen on (else TETHER_FRONTEND_HOST, 127.0.0.1)."
    ),
    port: int | None = typer.Option(
        None, "--port", help="Port to listen on, 0 for any (else TETHER_FRONTEND_PORT, 8080)."
    ),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run the frontend: the REST API for jobs, tasks, entitlements, machines and the region."""
    overrides: dict[str, Any] = {
        name: value for name, value in (("host", host), ("port", port)) if value is not None
    }
    settings = load_settings(
        lambda: FrontendSettings(**overrides), {"host": "--host", "port": "--port"}
    )
    serve(lambda store: Frontend(store, settings), url, log_level)
