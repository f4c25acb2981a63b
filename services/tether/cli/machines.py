"""`tether machine ls|drain|decommission|undrain`: the region's machines, their state and load;
taking one out of service and back (admin role)."""

from __future__ import annotations

from datetime import timedelta

import typer
from rich.table import Table

from tether.cli.common import TokenOption, UrlOption, argument_parser, client, out
from tether.cli.maintenance import parse_deadline
from tether.sdk import MachineDrainView, MachineView

app = typer.Typer(
    help="Look at the region's machines; drain, decommission and undrain them.",
    no_args_is_help=True,
)

STATE_STYLES = {"up": "green", "down": "red", "decommissioned": "dim"}

MachineArgument = typer.Argument(..., help="The machine's id.", show_default=False)
DeadlineOption = typer.Option(
    None,
    "--deadline",
    parser=argument_parser(parse_deadline),
    help="How long its tasks' controllers have to move them before they are moved anyway: "
    "0 (at once), 90s, 10m, 1h.",
    show_default="5m",
)
ReasonOption = typer.Option("", "--reason", help="Shown to the jobs' TaskControllers.")


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


@app.command()
def drain(
    machine_id: str = MachineArgument,
    deadline: timedelta | None = DeadlineOption,
    reason: str = ReasonOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Drain a machine: it takes no new tasks from now on, its tasks are moved off it as their
    controllers allow and by the deadline anyway, and it stays draining until `undrain`.
    Needs the admin role."""
    with client(url, token) as tether:
        drained = tether.drain_machine(machine_id, _seconds(deadline), reason)
    _print_drain(drained)


@app.command()
def decommission(
    machine_id: str = MachineArgument,
    deadline: timedelta | None = DeadlineOption,
    reason: str = ReasonOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Decommission a machine: it drains like `drain`, and once its last task is gone it is
    decommissioned and leaves its entitlement, until `undrain`. Needs the admin role."""
    with client(url, token) as tether:
        drained = tether.decommission_machine(machine_id, _seconds(deadline), reason)
    _print_drain(drained)


@app.command()
def undrain(
    machine_id: str = MachineArgument,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Undo a machine's drain and decommission: moves not yet done are withdrawn and it is up
    again (unless planned maintenance holds it). Needs the admin role."""
    with client(url, token) as tether:
        undone = tether.undrain_machine(machine_id)
    if not undone.cancelled:
        out().print(f"machine {machine_id} was not draining or decommissioning: nothing to undo")
        return
    cancelled = ", ".join(f"{notice.kind} {notice.id}" for notice in undone.cancelled)
    out().print(f"machine {machine_id}: cancelled {cancelled}")


def _seconds(deadline: timedelta | None) -> int | None:
    return None if deadline is None else int(deadline.total_seconds())


def _print_drain(drained: MachineDrainView) -> None:
    notice = drained.notice
    what = "decommissioning" if notice.kind == "decommission" else "draining"
    since = "now" if drained.created else "already, nothing changed"
    out().print(
        f"machine {drained.machine}: {what} ({since}); tasks moved off it by "
        f"{notice.start:%Y-%m-%d %H:%M:%S} UTC; notice {notice.id}",
        soft_wrap=True,
    )
