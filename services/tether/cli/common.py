"""What the user verbs share: the client options, error reporting, argument checks, polling."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from tether.model import DEFAULT_STATE_DIR, REGION_FILE_NAME, parse_job_handle
from tether.sdk import JSON, YAML, ClientSettings, TetherAPIError, TetherClient, TetherError

T = TypeVar("T")

CONTENT_TYPES: Final = {".yaml": YAML, ".yml": YAML, ".json": JSON}
"""The files commands read, by suffix."""

TOKEN_HINT = (
    "pass --token or set TETHER_TOKEN; `tether up` keeps a region's admin token in its "
    "directory (.tether/admin.token, or --region-dir)"
)

UrlOption = typer.Option(
    None,
    "--url",
    envvar="TETHER_URL",
    help="Base URL of a Tether frontend.",
    show_default="the url in the region directory's region.json, else http://127.0.0.1:8080",
)
TokenOption = typer.Option(
    None,
    "--token",
    envvar="TETHER_TOKEN",
    help="Bearer token to act with.",
    show_default="the admin token of the region in the region directory",
)
RegionDirOption = typer.Option(
    None,
    "--region-dir",
    envvar="TETHER_REGION_DIR",
    file_okay=False,
    help="The directory of a region `tether up --dir` runs: the url and token default to its.",
    show_default=str(DEFAULT_STATE_DIR),
)


def _no_transport() -> httpx.BaseTransport | None:
    return None


make_transport = _no_transport
"""Builds the HTTP transport of every client the verbs create; None is httpx's own. Tests
replace it with one returning an httpx.MockTransport."""


def out() -> Console:
    """A console on stdout, made per use so it follows the current stdout and COLUMNS."""
    return Console(highlight=False)


def err() -> Console:
    """A console on stderr for errors and progress, keeping stdout for results."""
    return Console(stderr=True, highlight=False)


def fail(message: str, details: Iterable[str] = (), *, status: int = 1) -> NoReturn:
    """Print a red one-line error (and indented details) on stderr and exit with `status`."""
    console = err()
    # soft_wrap: one line per message, however narrow the terminal, so it greps well.
    console.print(Text(f"error: {message}", style="red"), soft_wrap=True)
    for detail in details:
        console.print(Text(f"  {detail}"), soft_wrap=True)
    raise typer.Exit(status)


@contextmanager
def client(url: str | None, token: str | None, region_dir: Path | None) -> Iterator[TetherClient]:
    """A client from --url/--token (else TETHER_URL/TETHER_TOKEN, else the region in
    --region-dir or .tether); any API or connection error inside the block ends the command
    through `fail`, as does a --region-dir no region runs from."""
    if region_dir is not None and url is None and not (region_dir / REGION_FILE_NAME).is_file():
        fail(
            f"no region runs from {region_dir}: it has no {REGION_FILE_NAME} "
            "(start one with `tether up --dir DIR`, or pass --url)"
        )
    overrides: dict[str, Any] = {
        name: value
        for name, value in (("url", url), ("token", token), ("region_dir", region_dir))
        if value
    }
    try:
        settings = ClientSettings(**overrides)
    except ValidationError as exc:
        fail(f"invalid client settings: {exc}")
    try:
        with TetherClient.from_settings(settings, transport=make_transport()) as tether:
            yield tether
    except TetherAPIError as exc:
        details = [f"{error.loc}: {error.msg}" for error in exc.errors]
        if exc.status == 401:
            details.append(f"hint: {TOKEN_HINT}")
        fail(str(exc), details)
    except TetherError as exc:
        fail(str(exc))


def read_document(file: Path) -> tuple[bytes, str]:
    """A JSON or YAML file's bytes and content type (by its suffix); a file of another suffix,
    or one that cannot be read, ends the command through `fail`."""
    content_type = CONTENT_TYPES.get(file.suffix.lower())
    if content_type is None:
        fail(f"cannot tell the format of {file}: name it *.yaml, *.yml or *.json")
    try:
        return file.read_bytes(), content_type
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}")


def argument_parser(parse: Callable[[str], T]) -> Callable[[str], T]:
    """A typer `parser` giving the command `parse(value)`: a malformed argument is refused
    (exit 2, with the ValueError's message) before any request, and parsed only once."""

    def parser(value: str) -> T:
        try:
            return parse(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parser


def job_handle(handle: str) -> str:
    """`handle` once it is a job handle (`<entitlement>/<job>`); ValueError naming why not."""
    parse_job_handle(handle)
    return handle


HandleArgument = typer.Argument(
    ...,
    parser=argument_parser(job_handle),
    help="The job's handle: <entitlement>/<job>.",
    show_default=False,
)


def poll(interval_s: float, timeout_s: float) -> Iterator[None]:
    """Yield now and then every `interval_s` until `timeout_s` has passed; a caller that got
    what it waits for breaks out, one that runs out of iterations timed out."""
    deadline = time.monotonic() + timeout_s
    while True:
        yield
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(interval_s, left))


def counts(by_state: dict[str, int]) -> str:
    """`running=3 pending=1`: a state -> count map, biggest first."""
    ordered = sorted(by_state.items(), key=lambda item: (-item[1], item[0]))
    return " ".join(f"{state}={count}" for state, count in ordered if count) or "-"
