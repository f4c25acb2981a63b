"""`tether allocator`: run one allocator replica."""

from __future__ import annotations

from typing import Any

import typer

from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.cli.serving import LogLevel, load_settings, metrics_port_option, serve
from tether.cli.store import StoreUrl


def allocator(
    replica_id: str | None = typer.Option(
        None,
        "--id",
        help="Replica id, registered under allocators/ (else TETHER_ALLOCATOR_ID).",
        show_default="allocator-<pid>",
    ),
    host: str | None = typer.Option(
        None,
        "--host",
        help="Address to serve gRPC on (else TETHER_ALLOCATOR_HOST).",
        show_default="127.0.0.1",
    ),
    port: int | None = typer.Option(
        None,
        "--port",
        help="gRPC port; 0 picks a free one (else TETHER_ALLOCATOR_PORT).",
        show_default="0",
    ),
    metrics_port: int = metrics_port_option("allocator"),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run an allocator replica: places tasks on machines for the schedulers, over gRPC."""
    given = {"id": replica_id, "host": host, "port": port}
    overrides: dict[str, Any] = {
        field: value for field, value in given.items() if value is not None
    }
    settings = load_settings(
        lambda: AllocatorSettings(**overrides), {"id": "--id", "host": "--host", "port": "--port"}
    )
    serve(lambda store: Allocator(store, settings), url, log_level, metrics_port)
