"""`tether rebalancer`: run one rebalancer replica."""

from __future__ import annotations

from typing import Any

import typer

from tether.cli.serving import LogLevel, load_settings, metrics_port_option, serve
from tether.cli.store import StoreUrl
from tether.rebalancer.service import Rebalancer
from tether.rebalancer.settings import RebalancerSettings


def rebalancer(
    continuous: bool | None = typer.Option(
        None,
        "--continuous/--on-request",
        help="Plan and propose moves every --period-s on its own, or only the rounds asked for "
        "with `tether rebalance run` (else TETHER_REBALANCER_CONTINUOUS).",
        show_default="--on-request",
    ),
    period_s: float | None = typer.Option(
        None,
        "--period-s",
        help="Pause between two continuous rounds (else TETHER_REBALANCER_PERIOD_S).",
        show_default="60",
    ),
    metrics_port: int = metrics_port_option("rebalancer"),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run a rebalancer replica: one leads, and moves tasks to better machines through their
    TaskControllers (spread, stranded capacity, hot MSBs, idle machines, tasks left behind)."""
    given = {"continuous": continuous, "period_s": period_s}
    overrides: dict[str, Any] = {
        field: value for field, value in given.items() if value is not None
    }
    settings = load_settings(
        lambda: RebalancerSettings(**overrides),
        {"continuous": "--continuous", "period_s": "--period-s"},
    )
    serve(lambda store: Rebalancer(store, settings), url, log_level, metrics_port)
