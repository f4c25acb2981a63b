"""`tether scheduler`: run one replica of a scheduler shard."""

from __future__ import annotations

import pydantic
import typer

from tether.cli.serving import LogLevel, load_settings, serve
from tether.cli.store import StoreUrl
from tether.model import Name
from tether.scheduler.service import Scheduler
from tether.scheduler.settings import SchedulerSettings

_SHARD: pydantic.TypeAdapter[str] = pydantic.TypeAdapter(Name)


def _valid_shard(shard: str) -> str:
    try:
        return _SHARD.validate_python(shard)
    except pydantic.ValidationError as error:
        raise typer.BadParameter(error.errors(include_url=False)[0]["msg"]) from None


def scheduler(
    shard: str = typer.Option(
        ...,
        "--shard",
        envvar="TETHER_SCHEDULER_SHARD",
        callback=_valid_shard,
        help="The shard this replica serves, e.g. shard-0.",
    ),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run a scheduler replica: one replica per shard leads and reconciles its jobs."""
    settings = load_settings(SchedulerSettings, {})
    serve(lambda store: Scheduler(store, shard, settings), url, log_level)
