"""`tether broker`: run the resource broker of one datacenter."""

from __future__ import annotations

from typing import Any

import typer

from tether.broker.service import Broker
from tether.broker.settings import BrokerSettings
from tether.cli.serving import LogLevel, load_settings, metrics_port_option, serve
from tether.cli.store import StoreUrl


def broker(
    dc: str | None = typer.Option(
        None, "--dc", help="The datacenter whose machines to record (else TETHER_BROKER_DC)."
    ),
    metrics_port: int = metrics_port_option("broker"),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run the resource broker of one datacenter: records the machines whose agents heartbeat."""
    overrides: dict[str, Any] = {} if dc is None else {"dc": dc}
    settings = load_settings(lambda: BrokerSettings(**overrides), {"dc": "--dc"})
    serve(lambda store: Broker(store, settings), url, log_level, metrics_port)
