"""The state file of a local region (`.tether/region.json`): what `tether up` runs, and where."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

from pydantic import ConfigDict, Field, ValidationError

from tether.model.base import NonEmptyStr, TetherModel, Timestamp, from_json, problems_text

DEFAULT_STATE_DIR: Final = Path(".tether")
"""Where `tether up` keeps a region by default (`--dir`), relative to the current directory."""
REGION_FILE_NAME: Final = "region.json"
DEFAULT_REGION_FILE: Final = DEFAULT_STATE_DIR / REGION_FILE_NAME
"""The file the CLI and the SDK read when nothing else names a region."""

Count = Annotated[int, Field(ge=0)]


class RegionStateError(ValueError):
    """The region file exists but cannot be read, or is not what `tether up` writes."""


class RegionState(TetherModel):
    """What `tether up` records while it runs a region: written when the services start, again
    whenever one is restarted, and deleted when it stops. People read it too (`jq .metrics`),
    so the field names are a public format."""

    # Unknown fields are ignored, not refused: a newer `tether up` may record more, and an older
    # CLI or SDK must still find the region's URL and token in its file.
    model_config = ConfigDict(extra="ignore")

    pid: int = Field(gt=0)
    """The `tether up` process; `tether down` sends it SIGTERM."""
    url: NonEmptyStr
    """The first frontend's REST API, the SDK's and the CLI's default."""
    urls: list[NonEmptyStr] = Field(min_length=1)
    """Every frontend's REST API, the first one first."""
    docs_url: NonEmptyStr
    registry_address: NonEmptyStr
    """`host:port` of the TaskControllerRegistry (gRPC), `tether appsched`'s default."""
    admin_token_file: Path
    ca_file: Path | None = None
    """The region CA's certificate when the region serves TLS (`tether up --tls`): the CLI and
    the SDK trust it."""
    store: NonEmptyStr
    """The store's URL, for starting a service again by hand (`TETHER_STORE`)."""
    etcd_pid: int = Field(ge=0)
    """The etcd server `tether up --etcd` started; 0 when it started none."""
    logs: Path
    """The directory of the services' logs, `<service>.log` each."""
    started_at: Timestamp
    metrics: dict[str, NonEmptyStr]
    """Service name -> the URL Prometheus scrapes (the frontends' need the token)."""
    commands: dict[str, list[str]]
    """Service name -> the command that starts it, as an operator would after a crash."""
    processes: dict[str, int]
    """Service name -> the pid of its latest start."""
    restarts: dict[str, Count]
    """Service name -> how often `tether up` has started it again."""
    dead: list[str]
    """The services that do not run now (they failed and wait for a restart, or were given
    up on)."""


def read_region_state(path: Path) -> RegionState | None:
    """The region state in `path`; None when there is no such file (no region runs from there).

    Raises RegionStateError, with a message naming the file, when it cannot be read or does not
    hold a region state.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise RegionStateError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        return from_json(RegionState, data)
    except ValidationError as error:
        problems = problems_text(error, whole="file", most=3)
        raise RegionStateError(
            f"{path} is not a region file written by `tether up`: {problems}"
        ) from None


def write_region_state(path: Path, state: RegionState) -> None:
    """Writes `state` to `path` so that a reader sees the old file or the whole new one."""
    # One writer per state dir (`tether up` refuses a second), so a fixed temporary name will do.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(state.model_dump_json(indent=2) + "\n")
    temporary.replace(path)
