"""`tether shard`: look at the region's scheduler shards and operate them (admin)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from tether.cli.common import RegionDirOption, TokenOption, UrlOption, client, err, fail, out, poll
from tether.cli.listing import Column, Output, OutputOption, print_rows
from tether.sdk import ShardDetailView, TetherClient

app = typer.Typer(help="Look at and operate the scheduler shards (admin).", no_args_is_help=True)

ShardArgument = typer.Argument(..., help="The shard's id, e.g. shard-0.", show_default=False)
WAIT_POLL_S = 0.25


def _ago(moment: datetime | None, now: datetime) -> str:
    return "-" if moment is None else f"{(now - moment).total_seconds():.1f}s ago"


def _in(moment: datetime | None, now: datetime) -> str:
    return "-" if moment is None else f"{max(0.0, (moment - now).total_seconds()):.0f}s"


@app.command("ls")
def list_shards(
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """List scheduler shards: the leader's pid and the seconds until its lease runs out unless
    renewed, the standbys' pids, the leader's last reconcile, and the tasks, machines and
    entitlements each one decides for (-o wide adds jobs, operations and backlog)."""
    with client(url, token, region_dir) as tether:
        shards = tether.list_shards()
    print_rows(shards, _columns(datetime.now(UTC)), output, empty="no shards")
    if output not in (Output.TABLE, Output.WIDE):
        return
    for shard in shards:
        if shard.warning:
            out().print(f"[red]warning:[/red] {shard.warning}")


def _columns(now: datetime) -> list[Column[ShardDetailView]]:
    return [
        Column("shard", _name, whole=True, markup=True),
        Column("leader", _leader, markup=True),
        Column("lease", lambda shard: _in(shard.lease_expires_at, now), give_way=2),
        Column("standbys", _standbys, give_way=4, markup=True),
        Column("reconciled", lambda shard: _ago(shard.last_reconcile_at, now), give_way=3),
        Column("tasks", lambda shard: str(shard.tasks), justify="right"),
        Column("machines", lambda shard: str(shard.machines), give_way=1, justify="right"),
        Column("entitlements", lambda shard: ", ".join(shard.entitlements) or "-"),
        Column("jobs", lambda shard: str(shard.jobs), wide_only=True, justify="right"),
        Column("operations", lambda shard: str(shard.operations), wide_only=True),
        Column("backlog", _backlog, wide_only=True, justify="right"),
    ]


def _backlog(shard: ShardDetailView) -> str:
    return "-" if shard.backlog is None else str(shard.backlog)


def _name(shard: ShardDetailView) -> str:
    return f"{shard.shard} [yellow](draining)[/yellow]" if shard.draining else shard.shard


def _leader(shard: ShardDetailView) -> str:
    return str(shard.leader_pid) if shard.leader_pid is not None else "[red]none[/red]"


def _standbys(shard: ShardDetailView) -> str:
    return ", ".join(str(standby.pid) for standby in shard.standbys) or "[yellow]none[/yellow]"


@app.command("add")
def add(
    shard: str = ShardArgument,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Add a shard to the region: replicas started with `tether scheduler --shard ID` wait
    for this, then elect a leader. Adding a draining shard again stops its draining."""
    with client(url, token, region_dir) as tether:
        added = tether.add_shard(shard)
    leader = f"led by pid {added.leader_pid}" if added.leader_pid else "no leader yet"
    out().print(f"{added.shard}: added ({leader}; {len(added.standbys)} standby replicas)")


@app.command("move")
def move(
    shard: str = ShardArgument,
    entitlement: str = typer.Option(
        ..., "--entitlement", "-e", help="The entitlement to move off the shard."
    ),
    to: str | None = typer.Option(
        None, "--to", help="The shard to move it to; default the least-loaded other shard."
    ),
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Move an entitlement to another shard. Its jobs' tasks keep running; the new shard's
    leader takes over deciding for them, the old one stops at once."""
    with client(url, token, region_dir) as tether:
        moved = tether.move_entitlement(shard, entitlement, to)
    out().print(f"{moved.entitlement}: moved from {moved.from_shard} to {moved.to_shard}")


@app.command("failover")
def failover(
    shard: str = ShardArgument,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until a standby leads."),
    timeout: float = typer.Option(30.0, "--timeout", min=0, help="With --wait: give up after."),
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Hand the shard's leadership to a standby now (for maintenance of the leader's host).
    Refused when the shard has no standby."""
    with client(url, token, region_dir) as tether:
        started = tether.fail_over(shard)
        out().print(f"{shard}: deposed {started.previous_leader}")
        if wait:
            with err().status(f"{shard}: waiting for a standby to lead"):
                leader = _new_leader(tether, shard, started.previous_leader, timeout)
            out().print(f"{shard}: now led by {leader.leader} (pid {leader.leader_pid})")


def _new_leader(
    tether: TetherClient, shard: str, previous: str, timeout_s: float
) -> ShardDetailView:
    for _ in poll(WAIT_POLL_S, timeout_s):
        current = next((s for s in tether.list_shards() if s.shard == shard), None)
        if current is not None and current.leader not in (None, previous):
            return current
    fail(f"{shard}: no standby took over within {timeout_s:g} s; see tether shard ls")


@app.command("drain")
def drain(
    shard: str = ShardArgument,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Move every entitlement off the shard to the least-loaded others; it takes no new ones
    until added again (`tether shard add`). Tasks keep running."""
    with client(url, token, region_dir) as tether:
        drained = tether.drain_shard(shard)
    for moved in drained.moves:
        out().print(f"{moved.entitlement}: moved from {moved.from_shard} to {moved.to_shard}")
    out().print(f"{drained.shard}: drained ({len(drained.moves)} entitlements moved)")
