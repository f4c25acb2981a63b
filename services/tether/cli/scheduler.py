"""`tether scheduler`: run one replica of a scheduler shard."""

from __future__ import annotations

import pydantic
import typer

from tether.model import Name
from tether.scheduler.service import Scheduler
from tether.scheduler.settings import SchedulerSettings
from tether.service import connect_store, run
from tether.store import StoreError

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
    url: str | None = typer.Option(
        None,
        "--store",
        envvar="TETHER_STORE",
        help="Store URL: sqlite:///path.db, postgresql://..., or etcd://host:port[,host:port].",
        show_default="sqlite:///.tether/store.db",
    ),
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
) -> None:
    """Run a scheduler replica: one replica per shard leads and reconciles its jobs."""
    try:
        settings = SchedulerSettings()
    except pydantic.ValidationError as error:
        typer.echo(f"error: invalid TETHER_SCHEDULER_* setting: {error}", err=True)
        raise typer.Exit(2) from None
    try:
        run(Scheduler(connect_store(url), shard, settings), log_level)
    except StoreError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
