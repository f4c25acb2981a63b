"""`tether machine ls`: the region's machines with their state and load."""

from __future__ import annotations

import typer
from rich.table import Table

from tether.cli.common import TokenOption, UrlOption, client, out
from tether.sdk import MachineView

app = typer.Typer(help="Look at the region's machines.", no_args_is_help=True)

STATE_STYLES = {"up": "green", "down": "red"}


@app.command("ls")
def list_machines(url: str | None = UrlOption, token: str | None = TokenOption) -> None:
    """List machines: where they are, their state, and what their tasks hold (used/total)."""
    with client(url, token) as tether:
        machines = tether.list_machines()
    if not machines:
        out().print("no machines")
        return
    table = Table(
        "id",
        "dc/msb/rack",
        "state",
        "tasks",
        "cpu",
        "memory MiB",
        "heartbeat",
        caption="cpu (cores) and memory: used by tasks / capacity",
    )
    for machine in sorted(machines, key=lambda machine: machine.id):
        table.add_row(*_row(machine))
    out().print(table)


def _row(machine: MachineView) -> list[str]:
    where = machine.topology
    style = STATE_STYLES.get(machine.state, "yellow")
    return [
        machine.id,
        f"{where.dc}/{where.msb}/{where.rack}",
        f"[{style}]{machine.state}[/{style}]",
        str(machine.tasks),
        f"{_cores(machine.allocated.cpu)}/{_cores(machine.capacity.cpu)}",
        f"{machine.allocated.memory_mib}/{machine.capacity.memory_mib}",
        "yes" if machine.heartbeat else "[red]no[/red]",
    ]


def _cores(millicores: int) -> str:
    return f"{millicores / 1000:g}"
