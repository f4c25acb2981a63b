"""`tether queue ls [ENTITLEMENT]`: entitlements' use of their trees' quota, and their queues."""

from __future__ import annotations

from pathlib import Path

import typer

from tether.cli.common import RegionDirOption, TokenOption, UrlOption, client, out
from tether.cli.listing import Column, Output, OutputOption, print_rows, print_table, records
from tether.model.resources import resources_text
from tether.sdk import EntitlementUseView, QueuedJobView, QueueView

app = typer.Typer(
    help="Admission queues: jobs waiting for their entitlement's quota, in the order they start.",
    no_args_is_help=True,
)


@app.command("ls")
def list_queues(
    entitlement: str | None = typer.Argument(
        None, help="Show this entitlement's queue, job by job.", show_default=False
    ),
    limit: int = typer.Option(50, min=1, max=10_000, help="Show at most this many jobs."),
    offset: int = typer.Option(0, min=0, help="Skip this many jobs from the head."),
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Show queues: every entitlement's, or one's job by job.

    Without ENTITLEMENT: every entitlement you may see, what it reserves of its quota, what it
    borrows and lends, its dominant share divided by its weight, and its jobs waiting and
    admitted. With it: its waiting jobs in the order they start (priority, start deadline,
    submission), how long each has waited, and why the first one waits.
    """
    with client(url, token, region_dir) as tether:
        if entitlement is None:
            print_rows(tether.list_queues(), USE_COLUMNS, output, empty="no queues reported yet")
            return
        queue = tether.get_queue(entitlement, offset=offset, limit=limit)
    if not records(output, queue):
        _print_queue(queue, output)


USE_COLUMNS: list[Column[EntitlementUseView]] = [
    Column("entitlement", lambda use: use.name, whole=True),
    Column("parent", lambda use: use.parent or "-", give_way=2),
    Column("weight", lambda use: str(use.weight), give_way=3, justify="right"),
    Column(
        "reserved / quota",
        lambda use: f"{resources_text(use.reserved)} / {resources_text(use.quota)}",
    ),
    Column("borrowed", lambda use: resources_text(use.borrowed), give_way=5),
    Column("lent", lambda use: resources_text(use.lent), give_way=4),
    Column("share", lambda use: f"{use.dominant_share:.2f}", give_way=1, justify="right"),
    Column("queued", lambda use: str(use.queued), justify="right"),
    Column("admitted", lambda use: str(use.admitted), justify="right"),
]
QUEUED_JOB_COLUMNS: list[Column[QueuedJobView]] = [
    Column("#", lambda job: str(job.position), justify="right"),
    Column("job", lambda job: job.job, whole=True),
    Column("priority", lambda job: str(job.priority), give_way=2, justify="right"),
    Column("start by", lambda job: _start_by(job), give_way=1),
    Column("waiting", lambda job: duration_text(job.waiting_s)),
    Column("tasks", lambda job: _tasks_text(job)),
    Column("requested", lambda job: resources_text(job.requested), give_way=3),
    Column("reason", lambda job: job.reason or "-", wide_only=True),
]


def _start_by(job: QueuedJobView) -> str:
    return "-" if job.start_deadline is None else f"{job.start_deadline:%Y-%m-%d %H:%M:%S}"


def _print_queue(queue: QueueView, output: Output) -> None:
    console = out()
    use = queue.use
    if use is not None:
        console.print(
            f"{queue.entitlement}: reserves {resources_text(use.reserved)} of "
            f"{resources_text(use.quota)}; borrows {resources_text(use.borrowed)}, lends "
            f"{resources_text(use.lent)}; {use.admitted} job(s) admitted",
            soft_wrap=True,
        )
    if not queue.jobs:
        more = f" after the first {queue.offset}" if queue.total else ""
        console.print(f"no jobs wait in {queue.entitlement}'s queue{more}")
        return
    print_table(console, queue.jobs, QUEUED_JOB_COLUMNS, output)
    after = queue.total - queue.offset - len(queue.jobs)
    if after > 0:
        console.print(f"{after} more job(s) wait after these (--offset, --limit)")
    # Only the head of a queue has a reason: the others wait behind it.
    head = queue.jobs[0]
    if head.reason and head.position == 1:
        console.print(f"{head.job} waits because: {head.reason}", soft_wrap=True)


def _tasks_text(job: QueuedJobView) -> str:
    """e.g. "4", "2-8" (elastic), "4 (2 admitted)" (scaled up, or growing)."""
    text = str(job.tasks) if job.least_tasks == job.tasks else f"{job.least_tasks}-{job.tasks}"
    return f"{text} ({job.admitted} admitted)" if job.admitted else text


def duration_text(seconds: float) -> str:
    """e.g. "45s", "12m 5s", "3h 20m"."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60}s"
    return f"{whole // 3600}h {whole % 3600 // 60}m"
