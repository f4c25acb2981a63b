"""`tether status`: the region at a glance, from the frontend's region summary."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from tether.cli.common import TokenOption, UrlOption, client, counts, err, out
from tether.cli.listing import Output, OutputOption, records
from tether.model import DEFAULT_STATE_DIR, REGION_FILE_NAME, RegionStateError, read_region_state


def status(
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = typer.Option(
        None,
        "--region-dir",
        "--dir",
        envvar="TETHER_REGION_DIR",
        file_okay=False,
        help="The directory of a region `tether up` runs: the url and token default to its, and "
        "its services' restarts are shown.",
        show_default=str(DEFAULT_STATE_DIR),
    ),
) -> None:
    """Summarise the region: shard leaders, allocators, machines, jobs and tasks; and, for a
    region `tether up` runs from here (.tether/region.json), the services it restarted or left
    dead."""
    with client(url, token, region_dir) as tether:
        region = tether.region()
    if records(output, region):
        return
    machines = region.machines.model_dump(exclude={"total"})
    total = region.machines.total
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
            str(allocator.pid),
            _since(allocator.since),
        )
    console = out()
    console.print(summary)
    console.print(shards)
    if region.allocators:
        console.print(allocators)
    else:
        console.print("[red]no allocator is running[/red]")
    try:
        parts = local_services((region_dir or DEFAULT_STATE_DIR) / REGION_FILE_NAME)
    except RegionStateError as error:
        # The summary above came from the frontend; only the local services are unknown.
        err().print(Text(f"warning: {error}", style="yellow"), soft_wrap=True)
        parts = []
    for part in parts:
        console.print(part)


def local_services(state_file: Path) -> list[RenderableType]:
    """What `tether up` recorded of its services in `state_file`: a summary line and, when some
    were restarted or do not run, a table of those; nothing without the file. Raises
    RegionStateError when the file cannot be read."""
    state = read_region_state(state_file)
    if state is None:
        return []
    pids, restarts, dead = state.processes, state.restarts, state.dead
    restarted = sum(1 for count in restarts.values() if count)
    summary = (
        f"[bold]services[/bold]  {len(pids)}, {len(pids) - len(dead)} running, "
        f"{restarted} restarted (tether up, {state_file})"
    )
    if not restarted and not dead:
        return [summary]
    table = Table("service", "pid", "restarts", "state")
    for name in sorted(pids):
        if restarts.get(name) or name in dead:
            state_text = "[red]dead[/red]" if name in dead else "running"
            table.add_row(name, str(pids[name]), str(restarts.get(name, 0)), state_text)
    return [summary, table]


def _since(when: datetime | None) -> str:
    return f"{when:%Y-%m-%d %H:%M:%S}" if when else "-"
