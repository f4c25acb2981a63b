"""`-o table|wide|json|yaml`: tables fitting the terminal, every column, records for scripts."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import typer
import yaml
from rich.console import Console
from typer.testing import CliRunner

from tests.support.api import JOB, machine, shard, task
from tests.unit.cli.conftest import FakeAPI, run, table_rows
from tests.unit.cli.test_queues import use
from tether.cli.listing import Column, Output, print_table
from tether.cli.main import app

ROWS = [("team-a/a-rather-long-job-name", "running=3 pending=1", "2025-01-02", "x" * 40)]
COLUMNS: list[Column[tuple[str, str, str, str]]] = [
    Column("handle", lambda row: row[0], whole=True),
    Column("tasks", lambda row: row[1], give_way=2),
    Column("created", lambda row: row[2], give_way=1),
    Column("note", lambda row: row[3], wide_only=True),
]


def headers(output: Output, width: int) -> list[str]:
    console = Console(width=width, record=True, highlight=False)
    print_table(console, ROWS, COLUMNS, output)
    text = console.export_text()
    return table_rows(text)[0]


def test_a_narrow_terminal_drops_columns_in_their_give_way_order() -> None:
    assert headers(Output.TABLE, 120) == ["handle", "tasks", "created"]
    assert headers(Output.TABLE, 60) == ["handle", "tasks"]
    # A column that always stays is never dropped; its cells are never cut.
    assert headers(Output.TABLE, 30) == ["handle"]
    console = Console(width=20, record=True)
    print_table(console, ROWS, COLUMNS, Output.TABLE)
    assert table_rows(console.export_text())[1] == ["team-a/a-rather-long-job-name"]


def test_wide_shows_every_column_however_narrow_the_terminal() -> None:
    assert headers(Output.WIDE, 40) == ["handle", "tasks", "created", "note"]


def every_command(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += every_command(sub, (*path, name))
    return found


def test_every_listing_and_show_command_takes_output() -> None:
    listing = [
        (path, command)
        for path, command in every_command(typer.main.get_command(app))
        if path[-1:] in (("ls",), ("show",), ("operations",), ("explain",), ("status",))
        and path != ("store", "status")
    ]
    assert len(listing) >= 12
    for path, command in listing:
        options = {opt for param in command.params for opt in param.opts}
        assert {"-o", "--output"} <= options, path


LISTINGS: list[tuple[tuple[str, ...], str, dict[str, Any], Any]] = [
    (("job", "ls"), "/v1/jobs", {"jobs": [JOB]}, [JOB]),
    (("machine", "ls"), "/v1/machines", {"machines": [machine("m1")]}, [machine("m1")]),
    (("shard", "ls"), "/admin/shards", {"shards": [shard("shard-0", "s0")]}, None),
    (("queue", "ls"), "/v1/queues", {"queues": [use("ml")]}, None),
    (("job", "operations", "team-a/web"), "/v1/jobs/team-a/web/operations", {"operations": []}, []),
]


@pytest.mark.parametrize(("command", "path", "answer", "expected"), LISTINGS)
@pytest.mark.parametrize("output", ["json", "yaml"])
def test_records_are_the_api_s_whole(
    api: FakeAPI, command: tuple[str, ...], path: str, answer: dict[str, Any], expected: Any,
    output: str,
) -> None:  # fmt: skip
    api.on("GET", path, httpx.Response(200, json=answer))
    result = run(*command, "-o", output)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout) if output == "json" else yaml.safe_load(result.stdout)
    [listed] = answer.values()
    assert isinstance(printed, list)
    assert len(printed) == len(listed)
    if expected is not None:
        # Every field the frontend sent that the SDK knows; plain values as they were sent.
        for item, sent in zip(printed, expected, strict=True):
            known = {key: value for key, value in sent.items() if "future" not in key}
            assert set(item) >= set(known)
            assert all(
                item[key] == value for key, value in known.items() if not isinstance(value, dict)
            )


def test_an_empty_listing_is_an_empty_list_in_json(api: FakeAPI) -> None:
    api.on("GET", "/v1/jobs", httpx.Response(200, json={"jobs": []}))
    result = run("job", "ls", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_job_show_json_has_the_job_and_its_tasks(api: FakeAPI) -> None:
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=JOB))
    tasks = [task(0, "running", "m1"), task(1, "pending")]
    api.on("GET", "/v1/jobs/team-a/web/tasks", httpx.Response(200, json={"tasks": tasks}))
    result = run("job", "show", "team-a/web", "-o", "json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["job"]["handle"] == "team-a/web"
    assert [item["state"] for item in printed["tasks"]] == ["running", "pending"]


def test_queue_ls_fits_80_columns_with_whole_headers(api: FakeAPI) -> None:
    api.on("GET", "/v1/queues", httpx.Response(200, json={"queues": [use("ml-research")]}))
    result = run("queue", "ls", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    header = table_rows(result.stdout)[0]
    assert header[0] == "entitlement"
    assert all("…" not in cell for cell in header), header
    wide = run("queue", "ls", "-o", "wide", env={"COLUMNS": "80"})
    wide_header = table_rows(wide.stdout)[0]
    assert set(header) < set(wide_header)
    assert {"parent", "weight", "borrowed", "lent", "share"} <= set(wide_header)


def test_an_unknown_output_is_refused(api: FakeAPI) -> None:
    result = run("job", "ls", "-o", "xml")
    assert result.exit_code == 2
    assert "xml" in result.stderr
    assert api.requests == []


def test_shell_completion_offers_commands_and_output_formats() -> None:
    def complete(words: str) -> list[str]:
        result = CliRunner().invoke(
            app,
            [],
            env={
                "_TETHER_COMPLETE": "complete_bash",
                "COMP_WORDS": words,
                "COMP_CWORD": str(len(words.split(" ")) - 1),
            },
            prog_name="tether",
        )
        assert result.exit_code == 0, result.output
        return result.stdout.split()

    assert complete("tether ev") == ["events"]
    assert complete("tether job ls -o ") == ["table", "wide", "json", "yaml"]
    installer = CliRunner().invoke(app, ["--help"], prog_name="tether")
    assert "--install-completion" in installer.stdout


def test_text_from_the_region_is_shown_as_it_is_not_as_markup(api: FakeAPI) -> None:
    api.on("GET", "/v1/jobs/team-a/web", httpx.Response(200, json=JOB))
    odd = task(0, "failed", "m1", message="[/tmp/x] is missing [bold]")
    api.on("GET", "/v1/jobs/team-a/web/tasks", httpx.Response(200, json={"tasks": [odd]}))
    result = run("job", "show", "team-a/web")
    assert result.exit_code == 0, result.output
    assert "[/tmp/x] is missing [bold]" in result.stdout
