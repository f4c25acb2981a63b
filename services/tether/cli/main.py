"""The `tether` command: one subcommand group per area; later issues add the services and verbs."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Final

import typer
from rich.text import Text

# Typer vendors Click (0.29): its group and command types live only there.
from typer._click import Command, Context, Parameter
from typer.core import TyperGroup

from tether import __version__
from tether.cli import (
    events,
    jobs,
    machines,
    maintenance,
    profiles,
    queues,
    rebalance,
    region,
    resources,
    shards,
    status,
    tasks,
)
from tether.cli import store as store_commands
from tether.cli import up as region_commands
from tether.cli.common import err
from tether.cli.helptext import hide_flag_types, readable
from tether.cli.services import SERVICE_COMMANDS, command

LAZY_GROUPS: Final = {"appsched": "tether.cli.appsched:app", "certs": "tether.cli.certs:app"}
"""Command groups imported only when used, as `module:attribute` (a `typer.Typer`)."""
_LAZY_NAMES: Final = (*SERVICE_COMMANDS, *LAZY_GROUPS)


class _LazyCommands(TyperGroup):
    """Imports the service commands and `LAZY_GROUPS` only when one of them runs (or help lists
    them): importing them all cost every `tether` command about 1.5 s of CPU."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        params = super().get_params(ctx)
        hide_flag_types(params)
        return params

    def list_commands(self, ctx: Context) -> list[str]:
        listed = super().list_commands(ctx)
        return [*listed, *(name for name in _LAZY_NAMES if name not in listed)]

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in _LAZY_NAMES:
            found = _load(cmd_name)
            self.add_command(found, cmd_name)
        return None if found is None else readable(found)


def _load(name: str) -> Command:
    loaded: Command
    if name in LAZY_GROUPS:
        module, attribute = LAZY_GROUPS[name].split(":")
        group: typer.Typer = getattr(importlib.import_module(module), attribute)
        loaded = typer.main.get_group(group)
    else:
        single = typer.Typer()
        single.command(name)(command(name))
        loaded = typer.main.get_command(single)
    loaded.name = name
    return loaded


app = typer.Typer(
    name="tether",
    help="Tether: a regional cluster manager. Every command reads TETHER_* settings.",
    cls=_LazyCommands,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(store_commands.app, name="store")
app.add_typer(jobs.app, name="job")
app.add_typer(queues.app, name="queue")
app.add_typer(tasks.app, name="task")
app.add_typer(machines.app, name="machine")
app.add_typer(maintenance.app, name="maintenance")
app.add_typer(profiles.app, name="profile")
app.add_typer(resources.app, name="resource")
app.add_typer(shards.app, name="shard")
app.add_typer(rebalance.app, name="rebalance")
app.add_typer(region.app, name="region")
app.command("status")(status.status)
app.command("events")(events.events)
app.command("up")(region_commands.up)
app.command("down")(region_commands.down)


@app.command()
def version() -> None:
    """Print Tether's version."""
    typer.echo(__version__)


DEBUG_ENV: Final = "TETHER_DEBUG"


def main() -> None:
    """The `tether` command. A failure no verb foresaw is one line on stderr, not a traceback
    (TETHER_DEBUG=1 shows it); a service keeps its traceback, for its log."""
    try:
        app()
    except Exception as error:
        invoked = sys.argv[1:2]
        if os.environ.get(DEBUG_ENV) or (invoked and invoked[0] in SERVICE_COMMANDS):
            raise
        err().print(
            Text(f"error: {type(error).__name__}: {error} ({DEBUG_ENV}=1 shows where)", "red"),
            soft_wrap=True,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
