"""`tether events [-f]`: what happens in the region, a line an event, as it happens."""

from __future__ import annotations

import json
from pathlib import Path

import typer
import yaml
from rich.markup import escape

from tether.cli.common import (
    RegionDirOption,
    TokenOption,
    UrlOption,
    argument_parser,
    client,
    err,
    job_handle,
    out,
)
from tether.cli.listing import Output, OutputOption
from tether.sdk import EventGapView, RegionEventView, RegionObjectView, RegionSnapshotView
from tether.sdk.events import Followed

KIND_STYLES = {"job": "cyan", "task": "green", "operation": "magenta", "machine": "yellow"}


def events(
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep following: print each new event as it happens."
    ),
    job: str | None = typer.Option(
        None,
        "--job",
        parser=argument_parser(job_handle),
        help="Only this job's (<entitlement>/<job>).",
    ),
    entitlement: str | None = typer.Option(
        None, "--entitlement", "-e", help="Only this entitlement's."
    ),
    machine: str | None = typer.Option(None, "--machine", help="Only this machine's."),
    kind: list[str] | None = typer.Option(
        None,
        "--kind",
        help="Only these kinds (repeat for more): a kind such as task.started, or a group: "
        "job, task, operation, machine, shard.",
        show_default=False,
    ),
    since: int | None = typer.Option(
        None, "--since", min=0, help="Start after this store revision (an event's `revision`)."
    ),
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Print the region's events: jobs submitted, queued, admitted, deleted; tasks placed,
    started, exited, restarted; operations proposed, approved, done; machines drained; shards
    moved.

    Without -f: the events the frontend keeps (or those after --since), then it ends. With -f:
    from now (or after --since) on, until Ctrl-C; a dropped connection resumes after the last
    event printed. You see your entitlements' events; admins see all. -o json prints one JSON
    object a line (`kind` gap and snapshot when events were no longer kept)."""
    with client(url, token, region_dir) as tether:
        followed = tether.events(
            entitlement=entitlement,
            job=job,
            machine=machine,
            kinds=kind or (),
            follow=follow,
            since=since,
            on_drop=_dropped,
        )
        if follow and output in (Output.TABLE, Output.WIDE):
            err().print("following the region's events (Ctrl-C stops)", style="dim")
        printed = 0
        try:
            for item in followed:
                _print(item, output)
                printed += 1
        except KeyboardInterrupt:
            return
    if not printed and not follow and output in (Output.TABLE, Output.WIDE):
        err().print("no events kept after that revision; follow new ones with -f")


def _dropped(reason: str, last: int | None) -> None:
    after = f" after revision {last}" if last is not None else ""
    err().print(
        f"[yellow]warning:[/] the stream dropped ({escape(reason)}); resuming{after}",
        soft_wrap=True,
    )


def _print(item: Followed, output: Output) -> None:
    if output in (Output.JSON, Output.YAML):
        record = item.model_dump(mode="json")
        if isinstance(item, EventGapView):
            record = {"kind": "gap", **record}
        elif isinstance(item, RegionSnapshotView):
            record = {"kind": "snapshot", **record}
        if output is Output.JSON:
            typer.echo(json.dumps(record))
        else:
            typer.echo("---\n" + yaml.safe_dump(record, sort_keys=False), nl=False)
        return
    if isinstance(item, EventGapView):
        err().print(f"[yellow]warning:[/] {escape(item.detail)}", soft_wrap=True)
    elif isinstance(item, RegionSnapshotView):
        out().print(f"state at revision {item.revision}:", soft_wrap=True)
        for thing in item.objects:
            out().print(f"  {escape(_object_line(thing))}", soft_wrap=True)
    else:
        out().print(_event_line(item, wide=output is Output.WIDE), soft_wrap=True)


def _event_line(event: RegionEventView, *, wide: bool) -> str:
    """e.g. `17:50:39  task.started       default/hello/0 on m02  pid 24852`."""
    when = f"{event.at:%Y-%m-%d %H:%M:%S.%f}"[:-3] if wide else f"{event.at:%H:%M:%S}"
    style = KIND_STYLES.get(event.kind.split(".")[0], "blue")
    subject = escape(_subject(event))
    detail = escape(event.detail)
    revision = f"{event.revision:>8}  " if wide else ""
    return f"{revision}{when}  [{style}]{event.kind:<22}[/]  {subject}  {detail}".rstrip()


def _subject(thing: RegionEventView | RegionObjectView) -> str:
    """What an event or state is about, e.g. `default/hello/0 on m02`, `machine m1`."""
    if thing.job is not None:
        name = thing.job if thing.task is None else f"{thing.job}/{thing.task}"
        if thing.operation is not None:
            name += f" operation {thing.operation}"
        return name + (f" on {thing.machine}" if thing.machine else "")
    if thing.machine is not None:
        return f"machine {thing.machine}" + (
            f" of {thing.entitlement}" if thing.entitlement else ""
        )
    if thing.shard is not None:
        return f"{thing.entitlement} on {thing.shard}"
    return thing.entitlement or "-"


def _object_line(thing: RegionObjectView) -> str:
    state = f" {thing.state}" if thing.state else ""
    detail = f" ({thing.detail})" if thing.detail else ""
    return f"{thing.what} {_subject(thing)}{state}{detail}"
