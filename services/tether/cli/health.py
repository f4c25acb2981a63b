"""`tether health`: run the region's health checker."""

from __future__ import annotations

from typing import Any

import typer

from tether.cli.serving import LogLevel, load_settings, metrics_port_option, serve
from tether.cli.store import StoreUrl
from tether.health.service import HealthChecker
from tether.health.settings import HealthSettings


def health(
    grace_s: float | None = typer.Option(
        None,
        "--grace-s",
        help="Seconds without a heartbeat before an up machine is marked down (default 5).",
    ),
    metrics_port: int = metrics_port_option("health"),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run the health checker: machines go down without heartbeats and up when they are back."""
    overrides: dict[str, Any] = {} if grace_s is None else {"grace_s": grace_s}
    settings = load_settings(lambda: HealthSettings(**overrides), {"grace_s": "--grace-s"})
    serve(lambda store: HealthChecker(store, settings), url, log_level, metrics_port)
