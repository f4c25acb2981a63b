"""`tether scheduler`: run one replica of a scheduler shard."""

from __future__ import annotations

import typer

from tether.cli.serving import LogLevel, load_settings, metrics_port_option, serve
from tether.cli.store import StoreUrl
from tether.model import check_name
from tether.scheduler.service import Scheduler
from tether.scheduler.settings import SchedulerSettings


def _valid_shard(shard: str) -> str:
    try:
        return check_name(shard, "shard")
    except ValueError as error:
        raise typer.BadParameter(str(error)) from None


def scheduler(
    shard: str = typer.Option(
        ...,
        "--shard",
        envvar="TETHER_SCHEDULER_SHARD",
        callback=_valid_shard,
        help="The shard this replica serves, e.g. shard-0.",
    ),
    metrics_port: int = metrics_port_option("scheduler"),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run a scheduler replica: one replica per shard leads and reconciles its jobs."""
    settings = load_settings(SchedulerSettings, {})
    serve(lambda store: Scheduler(store, shard, settings), url, log_level, metrics_port)
