"""The `tether` command: one subcommand group per area; later issues add the services and verbs."""

from __future__ import annotations

import typer

from tether import __version__
from tether.cli import appsched, jobs, machines, maintenance, profiles, shards, status, tasks
from tether.cli import store as store_commands
from tether.cli import up as region_commands
from tether.cli.services import SERVICE_COMMANDS, command

app = typer.Typer(
    name="tether",
    help="Tether: a regional cluster manager. Every command reads TETHER_* settings.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(store_commands.app, name="store")
for name in SERVICE_COMMANDS:
    app.command(name)(command(name))
app.add_typer(jobs.app, name="job")
app.add_typer(tasks.app, name="task")
app.add_typer(machines.app, name="machine")
app.add_typer(maintenance.app, name="maintenance")
app.add_typer(profiles.app, name="profile")
app.add_typer(shards.app, name="shard")
app.add_typer(appsched.app, name="appsched")
app.command("status")(status.status)
app.command("up")(region_commands.up)
app.command("down")(region_commands.down)


@app.command()
def version() -> None:
    """Print Tether's version."""
    typer.echo(__version__)


if __name__ == "__main__":
    app()
