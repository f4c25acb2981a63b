"""`tether queue ls [ENTITLEMENT]`: entitlements' use of their trees' quota, and their queues."""

from __future__ import annotations

import typer
from rich.table import Table

from tether.cli.common import TokenOption, UrlOption, client, out
from tether.sdk import EntitlementUseView, QueuedJobView, QueueView, ResourcesView

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
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Show queues: every entitlement's, or one's job by job.

    Without ENTITLEMENT: every entitlement you may see, what it reserves of its quota, what it
    borrows and lends, its dominant share divided by its weight, and its jobs waiting and
    admitted. With it: its waiting jobs in the order they start (priority, start deadline,
    submission), how long each has waited, and why the first one waits.
    """
    with client(url, token) as tether:
        if entitlement is None:
            _print_uses(tether.list_queues())
        else:
            _print_queue(tether.get_queue(entitlement, offset=offset, limit=limit))


def _print_uses(uses: list[EntitlementUseView]) -> None:
    if not uses:
        out().print("no queues reported yet")
        return
    table = Table()
    table.add_column("entitlement", no_wrap=True, min_width=max(len(use.name) for use in uses))
    for name in ("parent", "weight", "reserved / quota", "borrowed", "lent", "share"):
        table.add_column(name)
    table.add_column("queued")
    table.add_column("admitted")
    for use in uses:
        table.add_row(
            use.name,
            use.parent or "-",
            str(use.weight),
            f"{resources_text(use.reserved)} / {resources_text(use.quota)}",
            resources_text(use.borrowed),
            resources_text(use.lent),
            f"{use.dominant_share:.2f}",
            str(use.queued),
            str(use.admitted),
        )
    out().print(table)


def _print_queue(queue: QueueView) -> None:
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
    table = Table("#")
    # Handles are never wrapped or cut.
    widest = max(len(job.job) for job in queue.jobs)
    table.add_column("job", no_wrap=True, min_width=widest)
    for name in ("priority", "start by", "waiting", "tasks", "requested"):
        table.add_column(name)
    for job in queue.jobs:
        table.add_row(
            str(job.position),
            job.job,
            str(job.priority),
            "-" if job.start_deadline is None else f"{job.start_deadline:%Y-%m-%d %H:%M:%S}",
            duration_text(job.waiting_s),
            _tasks_text(job),
            resources_text(job.requested),
        )
    console.print(table)
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


def resources_text(resources: ResourcesView) -> str:
    """e.g. "cpu 2000m, mem 512Mi, gpus 1"; "0" when there is nothing."""
    parts = [
        f"{label} {amount}{unit}"
        for label, amount, unit in (
            ("cpu", resources.cpu, "m"),
            ("mem", resources.memory_mib, "Mi"),
            ("disk", resources.disk_gib, "Gi"),
            ("gpus", resources.gpus, ""),
        )
        if amount
    ]
    parts += [f"{name} {amount}" for name, amount in sorted(resources.extra.items()) if amount]
    return ", ".join(parts) or "0"


def duration_text(seconds: float) -> str:
    """e.g. "45s", "12m 5s", "3h 20m"."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60}s"
    return f"{whole // 3600}h {whole % 3600 // 60}m"
