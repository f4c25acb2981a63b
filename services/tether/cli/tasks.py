"""`tether task logs`: read (and follow) a task's stdout or stderr through the REST API."""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

import typer

from tether.cli.common import RegionDirOption, TokenOption, UrlOption, argument_parser, client
from tether.model import LogStream, parse_job_handle
from tether.sdk import DEFAULT_TAIL_BYTES

app = typer.Typer(help="Look at tasks.", no_args_is_help=True)

FOLLOW_POLL_S = 1.0
"""How often `--follow` fetches the log again."""


class TaskRef(NamedTuple):
    """A task named by its job's handle and its index in the job."""

    handle: str
    task_index: int  # not `index`, which would hide tuple.index


def parse_task(task: str) -> TaskRef:
    """Split `<entitlement>/<job>/<index>` into the job handle and the index; ValueError
    says what is wrong."""
    handle, _, index = task.rpartition("/")
    if not (index.isascii() and index.isdigit()):
        raise ValueError(
            f"invalid task {task!r}: must be <entitlement>/<job>/<index>, e.g. team-a/web/0"
        )
    parse_job_handle(handle)
    return TaskRef(handle, int(index))


@app.command()
def logs(
    task: TaskRef = typer.Argument(
        ...,
        parser=argument_parser(parse_task),
        help="The task: <entitlement>/<job>/<index>.",
        show_default=False,
    ),
    stream: LogStream = typer.Option(LogStream.STDOUT, "--stream", help="Which output to read."),
    tail_bytes: int = typer.Option(
        DEFAULT_TAIL_BYTES, "--tail-bytes", min=1, help="Read at most this many bytes from the end."
    ),
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new output until interrupted (Ctrl-C)."
    ),
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Print the end of a task's stdout or stderr, as its agent has it."""
    handle, index = task
    with client(url, token, region_dir) as tether:
        shown = tether.task_logs(handle, index, stream.value, tail_bytes)
        typer.echo(shown, nl=False)
        try:
            while follow:
                time.sleep(FOLLOW_POLL_S)
                latest = tether.task_logs(handle, index, stream.value, tail_bytes)
                typer.echo(new_bytes(shown, latest), nl=False)
                shown = latest
        except KeyboardInterrupt:
            # Ctrl-C is how --follow ends; it is not an error.
            return


def new_bytes(previous: bytes, latest: bytes) -> bytes:
    """What `latest` adds to `previous`, both being tails of one growing log.

    The API has no offsets, so the overlap is the longest end of `previous` that begins
    `latest`; when nothing overlaps (the log was replaced, or grew by more than a tail) all of
    `latest` is new.
    """
    if latest.startswith(previous):
        return latest[len(previous) :]
    # Knuth-Morris-Pratt failure function over latest + separator + previous: its last value
    # is the length of the longest prefix of `latest` that is a suffix of `previous`. The
    # separator (-1, not a byte) keeps the match from running past the end of `latest`.
    text = [*latest, -1, *previous[-len(latest) :]]
    failure = [0] * len(text)
    for position in range(1, len(text)):
        matched = failure[position - 1]
        while matched and text[position] != text[matched]:
            matched = failure[matched - 1]
        if text[position] == text[matched]:
            matched += 1
        failure[position] = matched
    return latest[failure[-1] :]
