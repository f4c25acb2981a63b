"""`tether status`: the region at a glance, from the frontend's region summary."""

from __future__ import annotations

from datetime import datetime

from rich.table import Table

from tether.cli.common import TokenOption, UrlOption, client, counts, out


def status(url: str | None = UrlOption, token: str | None = TokenOption) -> None:
    """Summarise the region: shard leaders, allocators, machines, jobs and tasks."""
    with client(url, token) as tether:
        region = tether.region()
    machines = dict(region.machines)
    total = machines.pop("total", sum(machines.values()))
    summary = Table.grid(padding=(0, 2))
    summary.add_row("[bold]region[/bold]", region.name or "-")
    summary.add_row("[bold]machines[/bold]", f"{total} ({counts(machines)})")
    summary.add_row("[bold]jobs[/bold]", str(region.jobs))
    summary.add_row("[bold]tasks[/bold]", counts(region.tasks))
    shards = Table("shard", "leader", "leader since", "entitlements", title="shards")
    for shard in region.shards:
        shards.add_row(
            shard.shard,
            shard.leader or "[red]none[/red]",
            _since(shard.leader_since),
            ", ".join(shard.entitlements) or "-",
        )
    allocators = Table("id", "address", "pid", "since", title="allocators")
    for allocator in region.allocators:
        allocators.add_row(
            allocator.id,
            allocator.address,
            str(allocator.pid) if allocator.pid is not None else "-",
            _since(allocator.since),
        )
    console = out()
    console.print(summary)
    console.print(shards)
    if region.allocators:
        console.print(allocators)
    else:
        console.print("[red]no allocator is running[/red]")


def _since(when: datetime | None) -> str:
    return f"{when:%Y-%m-%d %H:%M:%S}" if when else "-"
