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
    harvest_notice_s: float | None = typer.Option(
        None,
        "--harvest-notice-s",
        help="Seconds the tasks a harvest machine's shrink leaves without room get to move off "
        "it (else TETHER_BROKER_HARVEST_NOTICE_S, default 30).",
    ),
    metrics_port: int = metrics_port_option("broker"),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run the resource broker of one datacenter: records the machines whose agents heartbeat,
    applies maintenance, and moves tasks off harvest machines that shrink or are evicted."""
    given = {"dc": dc, "harvest_notice_s": harvest_notice_s}
    overrides: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
    settings = load_settings(
        lambda: BrokerSettings(**overrides),
        {"dc": "--dc", "harvest_notice_s": "--harvest-notice-s"},
    )
    serve(lambda store: Broker(store, settings), url, log_level, metrics_port)
