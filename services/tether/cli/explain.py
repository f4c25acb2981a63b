"""`tether job explain`: why a job waits in its queue, and where an allocator would place it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rich.table import Column, Table

from tether.cli.common import (
    HandleArgument,
    RegionDirOption,
    TokenOption,
    UrlOption,
    client,
    out,
)
from tether.cli.listing import Output, OutputOption, records
from tether.sdk import JobView, PlacementView, QueueView


def explain(
    handle: str = HandleArgument,
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Explain a job's placement, as an allocator sees it now (e.g. why tasks stay pending).

    A job waiting in its entitlement's queue first says where it is in line, which jobs are
    ahead, which dimension is short and by how much, and whether preempting would help.
    Shows how many machines each hard rule rejected, in the order the rules apply;
    how many fitting machines match each preference of the job;
    the machines holding its tasks, and their rank for one more task
    (1: the first choice, -: it takes no more).
    """
    with client(url, token, region_dir) as tether:
        view = tether.explain(handle)
        if records(output, view):
            return
        job = tether.get_job(handle)
        record = job.admission
        # Queued, or admitted with tasks it gained waiting (a scale-up, an elastic job).
        if record is not None and (record.state == "queued" or job.queue_position is not None):
            # The jobs ahead, up to the few shown.
            shown = min(max((job.queue_position or 1) - 1, 1), _AHEAD_SHOWN)
            _print_waiting(job, tether.get_queue(job.entitlement, limit=shown))
    _print_placement(view)


_AHEAD_SHOWN = 5
"""Jobs ahead of a queued one that `tether job explain` names."""


def _print_waiting(job: JobView, queue: QueueView) -> None:
    """Why a waiting job waits (to start, or for the tasks it gained): its place, the first
    jobs ahead of it (`queue` holds them), the head's shortfall and whether preempting would
    help."""
    console = out()
    place = job.queue_position
    if place is None:
        console.print(f"[bold]{job.handle}[/bold] is no longer waiting", soft_wrap=True)
        return
    ahead = [entry for entry in queue.jobs if entry.job != job.handle][: place - 1]
    record = job.admission
    more = ""
    if record is not None and record.state != "queued":
        more = (
            f" for {record.tasks - record.admitted} more task(s) "
            f"({record.admitted} of {record.tasks} admitted)"
        )
    console.print(
        f"[bold]{job.handle}[/bold] waits in {job.entitlement}'s queue{more}, "
        f"{ordinal(place)} in line",
        soft_wrap=True,
    )
    if ahead:
        shown = ", ".join(entry.job for entry in ahead)
        more = f" and {place - 1 - len(ahead)} more" if place - 1 > len(ahead) else ""
        console.print(f"  ahead of it: {shown}{more}", soft_wrap=True)
        console.print(
            f"  the first waits because: {ahead[0].reason or '(deciding)'}", soft_wrap=True
        )
    elif job.admission is not None:
        console.print(f"  it waits because: {job.admission.reason or '(deciding)'}", soft_wrap=True)


def _print_placement(view: PlacementView) -> None:
    console = out()
    console.print(f"[bold]{view.job}[/bold]: {view.summary}", soft_wrap=True)
    console.print(
        f"machines: {view.machines_considered} considered, {view.machines_fitting} fitting, "
        f"{view.entitlement_machines} in the entitlement"
    )
    rules = Table("rule", _number("rejected"), "detail", title="hard rules, in order")
    for rule in view.rules:
        rules.add_row(
            rule.rule,
            str(rule.machines_rejected),
            rule.detail,
            style="dim" if rule.machines_rejected == 0 else None,
        )
    console.print(rules if view.rules else "no hard rules were applied")
    if view.preferences:
        preferences = Table(
            "preference", _number("weight"), _number("matching"), title="preferences, in order"
        )
        for preference in view.preferences:
            preferences.add_row(
                preference.rule, str(preference.weight), str(preference.machines_matching)
            )
        console.print(preferences)
    if not view.chosen:
        console.print("no machine holds tasks of this job")
        return
    chosen = Table("machine", "tasks", _number("rank"), "preferences", title="chosen machines")
    for machine in view.chosen:
        chosen.add_row(
            machine.machine,
            index_ranges(machine.tasks),
            str(machine.rank) if machine.rank else "-",
            ", ".join(machine.preferences),
        )
    console.print(chosen)


def _number(header: str) -> Column:
    return Column(header, justify="right")


def index_ranges(indexes: Iterable[int]) -> str:
    """Task indexes compactly: `0-3,7` for 0, 1, 2, 3 and 7."""
    ranges: list[list[int]] = []
    for index in sorted(set(indexes)):
        if ranges and index == ranges[-1][1] + 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def ordinal(place: int) -> str:
    """1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= place % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(place % 10, "th")
    return f"{place}{suffix}"
