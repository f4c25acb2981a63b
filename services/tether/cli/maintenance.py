"""`tether maintenance ...`: schedule, list and cancel planned maintenance (operator role)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import typer

from tether.cli.common import (
    RegionDirOption,
    TokenOption,
    UrlOption,
    argument_parser,
    client,
    fail,
    out,
)
from tether.cli.listing import Column, Output, OutputOption, print_rows
from tether.model import PlannedMaintenanceKind
from tether.sdk import MaintenanceView

app = typer.Typer(
    help="Plan machine maintenance: drain machines, move their tasks through TaskControl, and "
    "return them after the window.",
    no_args_is_help=True,
)

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(text: str) -> timedelta:
    """`90s`, `30m`, `2h`, `1d12h`: a positive duration."""
    duration = parse_deadline(text)
    if duration <= timedelta(0):
        raise ValueError("the duration must be more than 0 seconds")
    return duration


def parse_deadline(text: str) -> timedelta:
    """`90s`, `30m`, `2h`, `1d12h`, or `0` (at once): a duration of 0 or more."""
    if text.strip() == "0":
        return timedelta(0)
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise ValueError(f"'{text}' is not a duration such as 90s, 30m, 2h or 1d12h")
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def parse_start(text: str) -> datetime:
    """An RFC 3339 time; without a zone it is UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"'{text}' is not a time such as 2026-11-23T04:00:00Z") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@app.command()
def schedule(
    machines: list[str] | None = typer.Option(
        None, "--machine", help="A machine id (repeat for more)."
    ),
    msb: str | None = typer.Option(None, "--msb", help="Every machine of <dc>/<msb>."),
    rack: str | None = typer.Option(None, "--rack", help="Every machine of <dc>/<msb>/<rack>."),
    duration: timedelta = typer.Option(
        ...,
        "--duration",
        parser=argument_parser(parse_duration),
        help="How long the machines are away: 90s, 30m, 2h, 1d12h.",
        show_default=False,
    ),
    kind: PlannedMaintenanceKind = typer.Option(
        ...,
        "--kind",
        help="What is done to the machines (to drain or decommission one: tether machine).",
    ),
    start: datetime | None = typer.Option(
        None,
        "--start",
        parser=argument_parser(parse_start),
        help="When it starts (RFC 3339, UTC without a zone).",
        show_default="now, or --in",
    ),
    start_in: timedelta | None = typer.Option(
        None,
        "--in",
        parser=argument_parser(parse_duration),
        help="Start this long from now instead: 10m, 1h.",
    ),
    reason: str = typer.Option("", "--reason", help="Shown to the jobs' TaskControllers."),
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Schedule maintenance of machines, an MSB or a rack. The machines take no new tasks from
    now on; the jobs with tasks on them hear of it and their controllers may move those tasks
    early; at the start the remaining tasks are moved elsewhere; after the window the machines
    are up again. Needs the operator (or admin) role."""
    if sum(selector is not None for selector in (machines or None, msb, rack)) != 1:
        fail("name the machines with exactly one of --machine, --msb and --rack")
    if start is not None and start_in is not None:
        fail("give --start or --in, not both")
    request: dict[str, Any] = {"duration_s": int(duration.total_seconds()), "kind": kind.value}
    if reason:
        request["reason"] = reason
    if machines:
        request["machines"] = machines
    elif msb is not None:
        request["msb"] = msb
    else:
        request["rack"] = rack
    if start_in is not None:
        start = datetime.now(UTC) + start_in
    if start is not None:
        request["start"] = start.isoformat()
    with client(url, token, region_dir) as tether:
        notice = tether.schedule_maintenance(request)
    out().print(
        f"maintenance {notice.id}: {len(notice.machines)} machine(s), {notice.kind}, "
        f"{notice.start:%Y-%m-%d %H:%M:%S} to {notice.end:%Y-%m-%d %H:%M:%S} UTC ({notice.phase})"
    )


@app.command("ls")
def list_maintenance(
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """List maintenance scheduled or under way, soonest first (times in UTC)."""
    with client(url, token, region_dir) as tether:
        found = tether.list_maintenance()
    print_rows(found, MAINTENANCE_COLUMNS, output, empty="no maintenance scheduled")


def _machines(notice: MaintenanceView) -> str:
    shown = ", ".join(notice.machines[:3])
    more = len(notice.machines) - 3
    return f"{shown} (+{more})" if more > 0 else shown


MAINTENANCE_COLUMNS: list[Column[MaintenanceView]] = [
    # The id is what `cancel` takes: never cut.
    Column("id", lambda notice: notice.id, whole=True),
    Column("phase", lambda notice: notice.phase),
    Column("kind", lambda notice: notice.kind, give_way=2),
    Column("start", lambda notice: f"{notice.start:%Y-%m-%d %H:%M:%S}"),
    Column("end", lambda notice: f"{notice.end:%Y-%m-%d %H:%M:%S}", give_way=3),
    Column("machines", lambda notice: str(len(notice.machines)), justify="right"),
    Column("which", _machines, give_way=1),
    Column("reason", lambda notice: notice.reason or "-", wide_only=True),
    Column("all machines", lambda notice: ", ".join(notice.machines), wide_only=True),
]


@app.command()
def cancel(
    notice_id: str = typer.Argument(..., help="The maintenance's id.", show_default=False),
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Cancel maintenance: moves not yet done are withdrawn and the machines go back up at
    once, even in the middle of the window. Needs the operator (or admin) role."""
    with client(url, token, region_dir) as tether:
        notice = tether.cancel_maintenance(notice_id)
    out().print(f"cancelled maintenance {notice.id} of {len(notice.machines)} machine(s)")
