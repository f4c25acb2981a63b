"""`tether machine ls|drain|decommission|undrain`: the region's machines, their state and load;
taking one out of service and back (admin role)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import typer

from tether.cli.common import RegionDirOption, TokenOption, UrlOption, argument_parser, client, out
from tether.cli.listing import Column, Output, OutputOption, print_rows
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
def list_machines(
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """List machines: where they are, their state, and what their tasks hold of their cpu
    (cores) and memory (MiB), as used/capacity."""
    with client(url, token, region_dir) as tether:
        machines = tether.list_machines()
    ordered = sorted(machines, key=lambda machine: machine.id)
    print_rows(ordered, MACHINE_COLUMNS, output, empty="no machines")


def _state(machine: MachineView) -> str:
    style = STATE_STYLES.get(machine.state, "yellow")
    return f"[{style}]{machine.state}[/{style}]"


def _where(machine: MachineView) -> str:
    where = machine.topology
    return f"{where.dc}/{where.msb}/{where.rack}"


MACHINE_COLUMNS: list[Column[MachineView]] = [
    Column("id", lambda machine: machine.id, whole=True),
    Column("dc/msb/rack", _where, give_way=3),
    Column("state", _state, markup=True),
    Column("tasks", lambda machine: str(machine.tasks), justify="right"),
    Column("cpu", lambda m: f"{_cores(m.allocated.cpu)}/{_cores(m.capacity.cpu)}", give_way=4),
    Column("memory MiB", lambda m: f"{m.allocated.memory_mib}/{m.capacity.memory_mib}", give_way=2),
    Column(
        "heartbeat", lambda m: "yes" if m.heartbeat else "[red]no[/red]", give_way=1, markup=True
    ),
    Column("hardware", lambda machine: machine.hardware_type, wide_only=True),
    Column("entitlement", lambda machine: machine.entitlement or "-", wide_only=True),
    Column("host profile", lambda machine: machine.host_profile or "-", wide_only=True),
    Column("hostname", lambda machine: machine.hostname, wide_only=True),
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
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Drain a machine: it takes no new tasks from now on, its tasks are moved off it as their
    controllers allow and by the deadline anyway, and it stays draining until `undrain`.
    Needs the admin role."""
    with client(url, token, region_dir) as tether:
        drained = tether.drain_machine(machine_id, _seconds(deadline), reason)
    _print_drain(drained)


@app.command()
def decommission(
    machine_id: str = MachineArgument,
    deadline: timedelta | None = DeadlineOption,
    reason: str = ReasonOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Decommission a machine: it drains like `drain`, and once its last task is gone it is
    decommissioned and leaves its entitlement, until `undrain`. Needs the admin role."""
    with client(url, token, region_dir) as tether:
        drained = tether.decommission_machine(machine_id, _seconds(deadline), reason)
    _print_drain(drained)


@app.command()
def undrain(
    machine_id: str = MachineArgument,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Undo a machine's drain and decommission: moves not yet done are withdrawn and it is up
    again (unless planned maintenance holds it). Needs the admin role."""
    with client(url, token, region_dir) as tether:
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
