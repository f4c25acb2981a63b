"""`tether up` and `tether down` reading the region file, before any service starts."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from tests.support.region import write_region_file
from tests.unit.cli.conftest import run


def test_up_refuses_a_directory_a_running_region_uses(tmp_path: Path) -> None:
    write_region_file(tmp_path, pid=os.getpid())
    result = run("up", "--dir", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: a region is already running from {tmp_path} (pid {os.getpid()}); stop it: "
        "tether down"
    ]


def test_up_warns_of_an_unreadable_region_file_and_goes_on(tmp_path: Path) -> None:
    (tmp_path / "region.json").write_text("{not json")
    # A port in use ends `tether up` at its next check, before it starts anything.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        result = run("up", "--dir", str(tmp_path), "--port", str(port))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"warning: {tmp_path / 'region.json'} is not a region file written by `tether up`: "
        "file: Invalid JSON: key must be a string at line 1 column 2; replacing it",
        f"error: port {port} on 127.0.0.1 (for a frontend) is not free; choose another --port",
    ]


def test_down_without_a_region_file_stops_nothing(tmp_path: Path) -> None:
    for how in (("--dir", str(tmp_path)), ("--region-dir", str(tmp_path))):
        result = run("down", *how)
        assert result.exit_code == 0, result.output
        assert result.stderr.splitlines() == [f"No region is running from {tmp_path}."]
    # Like every command, it finds the region in TETHER_REGION_DIR.
    result = run("down", env={"TETHER_REGION_DIR": str(tmp_path)})
    assert result.stderr.splitlines() == [f"No region is running from {tmp_path}."]


def test_down_names_a_region_file_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "region.json").write_text('{"pid": 1}')
    result = run("down", "--dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    [warning, nothing] = result.stderr.splitlines()
    assert warning.startswith(
        f"warning: {tmp_path / 'region.json'} is not a region file written by `tether up`: "
    )
    assert warning.endswith("; it names no region to stop")
    assert nothing == f"No region is running from {tmp_path}."


def test_down_leaves_a_region_whose_process_is_gone(tmp_path: Path) -> None:
    # The file of a `tether up` that was killed: its pid runs no more.
    write_region_file(tmp_path, pid=2**22 + 1)
    result = run("down", "--dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"No region is running from {tmp_path}."]


def test_messages_stay_one_line_on_a_narrow_terminal(tmp_path: Path) -> None:
    write_region_file(tmp_path, pid=os.getpid())
    narrow: dict[str, str | None] = {"COLUMNS": "40"}
    refused = run("up", "--dir", str(tmp_path), env=narrow)
    assert refused.exit_code == 2
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    nothing = run("down", "--dir", str(tmp_path / "elsewhere"), env=narrow)
    assert nothing.stderr.splitlines() == [f"No region is running from {tmp_path / 'elsewhere'}."]
