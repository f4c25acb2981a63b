"""`tether job ...`: submit, list, show, explain, scale, update, restart, move and delete jobs
(REST API)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tether.cli import explain
from tether.cli.common import (
    HandleArgument,
    RegionDirOption,
    TokenOption,
    UrlOption,
    client,
    counts,
    err,
    fail,
    out,
    poll,
    read_document,
)
from tether.cli.listing import Column, Output, OutputOption, print_rows, print_table, records
from tether.sdk import (
    RUNNING,
    JobView,
    OperationView,
    TaskView,
    TetherAPIError,
    TetherClient,
)

app = typer.Typer(help="Submit, inspect, scale, update and delete jobs.", no_args_is_help=True)

WAIT_POLL_S = 0.5
"""How often `--wait` asks the frontend again."""

TimeoutOption = typer.Option(
    120.0, "--timeout", min=0, help="With --wait: give up (exit 1) after this many seconds."
)


@app.command()
def submit(
    file: Path = typer.Argument(
        ...,
        exists=True,
        dir_okay=False,
        readable=True,
        help="The JobSpec: YAML (.yaml, .yml) or JSON (.json).",
        show_default=False,
    ),
    idempotency_key: str | None = typer.Option(
        None,
        "--idempotency-key",
        help="Submitting again with the same key and spec returns the same job, not a new one.",
    ),
    wait: bool = typer.Option(False, "--wait", help="Wait until every task is running."),
    timeout: float = TimeoutOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Submit a job and print its handle (<entitlement>/<job>)."""
    spec, content_type = read_document(file)
    with client(url, token, region_dir) as tether:
        job = tether.submit_job(spec, content_type, idempotency_key)
        out().print(job.handle)
        if wait:
            _wait_running(tether, job, timeout)


def _wait_running(tether: TetherClient, job: JobView, timeout_s: float) -> None:
    tasks: list[TaskView] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TextColumn("running"), TimeElapsedColumn(), console=err()) as bar:
        progress = bar.add_task(job.handle, total=job.count)
        for _ in poll(WAIT_POLL_S, timeout_s):
            tasks = [task for task in tether.list_tasks(job.handle) if task.index < job.count]
            running = sum(task.state == RUNNING for task in tasks)
            bar.update(progress, completed=running)
            if running >= job.count:
                return
    by_index = {task.index: task for task in tasks}
    waiting = [
        _describe(by_index[index]) if index in by_index else f"task {index}: not created yet"
        for index in range(job.count)
        if index not in by_index or by_index[index].state != RUNNING
    ]
    fail(
        f"{job.handle}: {job.count - len(waiting)} of {job.count} tasks running after "
        f"{timeout_s:g} s",
        waiting,
    )


def _describe(task: TaskView) -> str:
    where = f" on {task.machine}" if task.machine else ""
    why = f": {task.message}" if task.message else ""
    return f"task {task.index}: {task.state}{where}{why}"


JOB_COLUMNS: list[Column[JobView]] = [
    Column("handle", lambda job: job.handle, whole=True),
    Column("count", lambda job: str(job.count), justify="right"),
    Column("running", lambda job: str(job.running), justify="right"),
    Column("admission", lambda job: _admission_cell(job), give_way=3),
    Column("generation", lambda job: str(job.generation), give_way=1, justify="right"),
    Column("tasks", lambda job: counts(job.tasks), give_way=2),
    Column("deleting", lambda job: "yes" if job.deleting else "", give_way=4),
    Column("created", lambda job: f"{job.created_at:%Y-%m-%d %H:%M:%S}", wide_only=True),
]


@app.command("ls")
def list_jobs(
    entitlement: str | None = typer.Option(
        None, "--entitlement", "-e", help="Only jobs of this entitlement."
    ),
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """List the jobs you can see."""
    with client(url, token, region_dir) as tether:
        jobs = tether.list_jobs(entitlement)
    print_rows(jobs, JOB_COLUMNS, output, empty="no jobs")


def _admission_cell(job: JobView) -> str:
    record = job.admission
    return "-" if record is None else f"{record.state} {record.admitted}/{record.tasks}"


@app.command()
def show(
    handle: str = HandleArgument,
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Show one job and its tasks."""
    with client(url, token, region_dir) as tether:
        job = tether.get_job(handle)
        tasks = tether.list_tasks(handle)
    if records(output, {"job": job, "tasks": tasks}):
        return
    template = job.spec.get("task", {})
    fields = Table.grid(padding=(0, 2))
    for name, value in (
        ("handle", job.handle),
        ("package", f"{template.get('package', '?')} {template.get('version', '')}".strip()),
        ("command", " ".join([template.get("command", "?"), *template.get("args", [])])),
        ("kind", job.spec.get("kind", "service")),
        ("count", f"{job.count} ({job.running} running)"),
        ("tasks", counts(job.tasks)),
        ("generation", str(job.generation)),
        ("deleting", "yes" if job.deleting else "no"),
        ("created", f"{job.created_at:%Y-%m-%d %H:%M:%S}"),
        ("updated", f"{job.updated_at:%Y-%m-%d %H:%M:%S}"),
        ("admission", admission_text(job)),
        ("operations", counts(job.operations or {})),
        ("controller", _controller(job)),
    ):
        fields.add_row(f"[bold]{name}[/bold]", str(value))
    console = out()
    console.print(fields)
    if not tasks:
        console.print("no tasks yet")
        return
    ordered = sorted(tasks, key=lambda task: task.index)
    print_table(console, ordered, TASK_COLUMNS, output)


TASK_COLUMNS: list[Column[TaskView]] = [
    Column("index", lambda task: str(task.index), justify="right"),
    Column("state", lambda task: task.state),
    Column("machine", lambda task: task.machine or "-", whole=True),
    Column("pid", lambda task: "-" if task.pid is None else str(task.pid), give_way=2),
    Column("restarts", lambda task: str(task.restarts), give_way=3, justify="right"),
    Column("attempt", lambda task: str(task.attempt), give_way=1, justify="right"),
    Column("message", lambda task: task.message),
]


def admission_text(job: JobView) -> str:
    """Where the job is in its queue, e.g. "queued, 2nd in line: not enough quota ..."."""
    record = job.admission
    if record is None:
        return "- (older than admission: all its tasks run)"
    if record.state == "queued":
        place = f", {explain.ordinal(job.queue_position)} in line" if job.queue_position else ""
        return f"queued{place}" + (f": {record.reason}" if record.reason else "")
    text = f"{record.state}, {record.admitted} of {record.tasks} tasks"
    if job.queue_position is not None:
        # The tasks it gained wait for admission (a scale-up, an elastic job growing).
        text += f", the others {explain.ordinal(job.queue_position)} in line"
        text += f": {record.reason}" if record.reason else ""
    if record.preemptions:
        text += f"; preempted {record.preemptions} time(s), last for {record.preempted_by}"
    return text


def _controller(job: JobView) -> str:
    """How the job's TaskController answers: its endpoint and the last failure, if any."""
    control = job.control
    if control is None or not control.controller:
        return "- (the built-in rule approves)"
    if not control.error:
        return f"{control.controller} (answering; call {control.sequence})"
    return f"{control.controller}: FAILING ({control.failures} in a row): {control.error}"


app.command()(explain.explain)


@app.command()
def scale(
    handle: str = HandleArgument,
    count: int = typer.Argument(..., min=1, help="The new number of tasks.", show_default=False),
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Change a job's task count."""
    with client(url, token, region_dir) as tether:
        job = tether.scale_job(handle, count)
    out().print(f"{job.handle}: count {job.count}, generation {job.generation}")


@app.command()
def update(
    handle: str = HandleArgument,
    version: str | None = typer.Option(None, "--version", help="The package version to roll out."),
    suspend: bool | None = typer.Option(
        None,
        "--suspend/--resume",
        help="Suspend a batch job (its tasks stop with notice and it holds no quota) or resume "
        "it at its place in the queue.",
        show_default=False,
    ),
    wait: bool = typer.Option(
        False, "--wait", help="Wait until every task runs the new version, showing progress."
    ),
    timeout: float = TimeoutOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Roll out another package version, or suspend or resume a batch job.

    Running tasks are restarted on the new version as the job's TaskController approves
    (without one, at most the update policy's share at once). A suspended job's tasks stop
    with notice and it holds no quota; resumed, it is admitted again at its place in line."""
    if version is None and suspend is None:
        fail("give --version, --suspend or --resume")
    if wait and version is None:
        fail("--wait waits for a --version to roll out")
    with client(url, token, region_dir) as tether:
        if suspend is not None:
            job = tether.suspend_job(handle) if suspend else tether.resume_job(handle)
            out().print(f"{job.handle}: {'suspended' if suspend else 'resumed'}")
        if version is None:
            return
        job = tether.update_job(handle, version)
        out().print(f"{job.handle}: version {version}, generation {job.generation}")
        if not wait:
            return
        with err().status(f"updating {handle}") as status:
            for _ in poll(WAIT_POLL_S, timeout):
                tasks = tether.list_tasks(handle)
                done = sum(1 for t in tasks if t.version == version and t.state == "running")
                status.update(f"updating {handle}: {done} of {job.count} tasks run {version}")
                if done >= job.count:
                    out().print(f"{handle}: all {job.count} tasks run version {version}")
                    return
    fail(f"{handle} is not fully on version {version} after {timeout:g} s; see tether job show")


TaskOption = typer.Option(
    None, "--task", min=0, help="A task index (repeat for more); default every task."
)
ReasonOption = typer.Option("", "--reason", help="Why, as the job's TaskController sees it.")


def _request(tether: TetherClient, handle: str, kind: str, tasks: list[int] | None,
             reason: str) -> None:  # fmt: skip
    operations = tether.request_operations(handle, kind, tasks, reason)
    indexes = explain.index_ranges(task for operation in operations for task in operation.tasks)
    out().print(
        f"{handle}: {len(operations)} {kind} operation(s) for tasks {indexes}, waiting for the "
        "job's TaskController (see tether job operations)"
    )


@app.command()
def restart(
    handle: str = HandleArgument,
    tasks: list[int] | None = TaskOption,
    reason: str = ReasonOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Restart tasks in place as a new attempt, as the job's TaskController approves (without
    one, at most the update policy's share at once)."""
    with client(url, token, region_dir) as tether:
        _request(tether, handle, "restart", tasks, reason)


@app.command()
def move(
    handle: str = HandleArgument,
    tasks: list[int] | None = TaskOption,
    reason: str = ReasonOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Move tasks: stop them and place them anew (the allocator chooses the machine), as the
    job's TaskController approves."""
    with client(url, token, region_dir) as tether:
        _request(tether, handle, "move", tasks, reason)


@app.command()
def operations(
    handle: str = HandleArgument,
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """List the job's task operations: updates, restarts and moves waiting for approval,
    approved, or completed but not yet reported to its TaskController."""
    with client(url, token, region_dir) as tether:
        found = tether.list_operations(handle)
    print_rows(found, OPERATION_COLUMNS, output, empty=f"{handle}: no task operations")


OPERATION_COLUMNS: list[Column[OperationView]] = [
    Column("id", lambda operation: operation.id, whole=True),
    Column("kind", lambda operation: operation.kind),
    Column("tasks", lambda operation: explain.index_ranges(operation.tasks)),
    Column("state", lambda operation: operation.state),
    Column(
        "deadline",
        lambda operation: f"{operation.deadline:%Y-%m-%d %H:%M:%S}" if operation.deadline else "-",
        give_way=1,
    ),
    Column("reason", lambda operation: operation.reason),
]


@app.command("rm")
def remove(
    handle: str = HandleArgument,
    wait: bool = typer.Option(False, "--wait", help="Wait until the job is gone."),
    timeout: float = TimeoutOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Delete a job: its tasks are stopped, then the job disappears."""
    with client(url, token, region_dir) as tether:
        tether.delete_job(handle)
        if not wait:
            out().print(f"deleting {handle}")
            return
        with err().status(f"deleting {handle}: stopping its tasks"):
            for _ in poll(WAIT_POLL_S, timeout):
                if _gone(tether, handle):
                    out().print(f"deleted {handle}")
                    return
    fail(f"{handle} still exists after {timeout:g} s; its tasks may still be stopping")


def _gone(tether: TetherClient, handle: str) -> bool:
    try:
        tether.get_job(handle)
    except TetherAPIError as exc:
        if exc.status == 404:
            return True
        raise
    return False
