"""The README and the docs stay true: every link leads somewhere that exists, every command the
README shows is one Tether has (its tour runs for real in tests/e2e/test_readme.py), and the
README stays a front page."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.readme import DOCUMENTS, README, ROOT, anchors, code_blocks, links
from tether.cli.main import app

MAX_README_LINES = 250


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## Two commands", "## A five-minute tour"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_issue_numbers_in_what_users_read(document: Path) -> None:
    numbered = re.findall(r"\b[Ii]ssues? \d+", document.read_text())
    assert numbered == [], document


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_leads_to_a_file_and_heading_that_exist(document: Path) -> None:
    for target in links(document):
        if re.match(r"^[a-z]+:", target):
            continue  # another site's page: not this project's to keep
        path, _, fragment = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        assert linked.exists(), f"{document.name}: {target}: no such file"
        assert str(linked).startswith(str(ROOT)), f"{document.name}: {target}: outside the project"
        if fragment:
            assert linked.suffix == ".md", f"{document.name}: {target}: an anchor of a non-page"
            assert fragment in anchors(linked), f"{document.name}: {target}: no such heading"


def readme_commands() -> list[str]:
    return [
        command
        for block in code_blocks(README)
        if block.language == "bash"
        for command in block.commands()
    ]


def test_every_script_the_readme_runs_exists() -> None:
    scripts = {shlex.split(c)[0] for c in readme_commands() if c.startswith("scripts/")}
    assert scripts == {"scripts/up", "scripts/test"}
    for script in scripts:
        assert os.access(ROOT / script, os.X_OK), script


@pytest.mark.parametrize(
    "command", [c for c in readme_commands() if c.startswith("tether ")], ids=str
)
def test_every_tether_command_in_the_readme_takes_what_it_is_given(command: str) -> None:
    words = shlex.split(command)[1:]
    path = [word for word in words if not word.startswith("-")]
    # The command's own words, before its arguments: as deep as `--help` still answers.
    runner = CliRunner()
    depth = 1
    while depth < len(path):
        answered = runner.invoke(app, [*path[: depth + 1], "--help"], env={"COLUMNS": "200"})
        if answered.exit_code != 0 or "Usage:" not in answered.output:
            break
        depth += 1
    helped = runner.invoke(app, [*path[:depth], "--help"], env={"COLUMNS": "200"})
    assert helped.exit_code == 0, helped.output
    for option in (word.split("=")[0] for word in words if word.startswith("--")):
        assert option in helped.output, (command, option)


def test_every_option_of_scripts_up_the_readme_gives_exists() -> None:
    helped = CliRunner().invoke(app, ["up", "--help"], env={"COLUMNS": "200"})
    for option in re.findall(r"scripts/up (--[a-z-]+)", README.read_text()):
        assert option in helped.output, option
