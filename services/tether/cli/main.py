"""The `tether` command: one subcommand group per area; later issues add the services and verbs."""

from __future__ import annotations

import typer

from tether import __version__
from tether.cli import appsched, jobs, machines, maintenance, shards, status, tasks
from tether.cli import store as store_commands
from tether.cli import up as region_commands
from tether.cli.agent import agent as agent_command
from tether.cli.agent_sim import agent_sim as agent_sim_command
from tether.cli.allocator import allocator as allocator_command
from tether.cli.broker import broker as broker_command
from tether.cli.frontend import frontend as frontend_command
from tether.cli.health import health as health_command
from tether.cli.registry import registry as registry_command
from tether.cli.scheduler import scheduler as scheduler_command

app = typer.Typer(
    name="tether",
    help="Tether: a regional cluster manager. Every command reads TETHER_* settings.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(store_commands.app, name="store")
app.command("allocator")(allocator_command)
app.command("agent")(agent_command)
app.command("agent-sim")(agent_sim_command)
app.command("broker")(broker_command)
app.command("frontend")(frontend_command)
app.command("health")(health_command)
app.command("registry")(registry_command)
app.command("scheduler")(scheduler_command)
app.add_typer(jobs.app, name="job")
app.add_typer(tasks.app, name="task")
app.add_typer(machines.app, name="machine")
app.add_typer(maintenance.app, name="maintenance")
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
