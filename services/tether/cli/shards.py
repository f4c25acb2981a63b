"""`tether shard ls`: the scheduler shards, their leaders and what each holds (admin)."""

from __future__ import annotations

import typer
from rich.table import Table

from tether.cli.common import TokenOption, UrlOption, client, out

app = typer.Typer(help="Look at the region's scheduler shards (admin).", no_args_is_help=True)


@app.command("ls")
def list_shards(url: str | None = UrlOption, token: str | None = TokenOption) -> None:
    """List scheduler shards: the leader (pid), and the entitlements, jobs, tasks, machines and
    task operations each one decides for. Needs the admin role."""
    with client(url, token) as tether:
        shards = tether.list_shards()
    table = Table("shard", "leader pid", "entitlements", "jobs", "tasks", "machines", "operations")
    for shard in shards:
        table.add_row(
            shard.shard,
            str(shard.leader_pid) if shard.leader_pid is not None else "[red]none[/red]",
            ", ".join(shard.entitlements) or "-",
            str(shard.jobs),
            str(shard.tasks),
            str(shard.machines),
            str(shard.operations),
        )
    out().print(table)
