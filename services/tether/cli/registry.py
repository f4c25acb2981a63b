"""`tether registry`: run the TaskController registry."""

from __future__ import annotations

from typing import Any

import typer

from tether.cli.serving import LogLevel, load_settings, metrics_port_option, serve
from tether.cli.store import StoreUrl
from tether.taskcontrol.registry.service import Registry
from tether.taskcontrol.registry.settings import RegistrySettings


def registry(
    host: str | None = typer.Option(
        None,
        "--host",
        help="Address to serve gRPC on (else TETHER_REGISTRY_HOST).",
        show_default="127.0.0.1",
    ),
    port: int | None = typer.Option(
        None,
        "--port",
        help="gRPC port; 0 picks a free one (else TETHER_REGISTRY_PORT).",
        show_default="0",
    ),
    metrics_port: int = metrics_port_option("registry"),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run the TaskController registry: application-level schedulers register their endpoints
    for a job or an entitlement here (tether.taskcontrol.v1.TaskControllerRegistry, gRPC).
    Stateless: run as many as you like against one store."""
    given = {"host": host, "port": port}
    overrides: dict[str, Any] = {
        field: value for field, value in given.items() if value is not None
    }
    settings = load_settings(
        lambda: RegistrySettings(**overrides), {"host": "--host", "port": "--port"}
    )
    serve(lambda store: Registry(store, settings), url, log_level, metrics_port)
