"""`--help` at any width (cli/helptext.py): docstring paragraphs wrap as paragraphs, list items
stay one a line, examples stay as written, and no flag shows a value placeholder."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from tether.cli.helptext import reflow
from tether.cli.main import app


def help_of(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_hard_wrapped_paragraph_becomes_one_line_and_lists_and_examples_keep_theirs() -> None:
    text = """First line.

    A paragraph written
    over three lines
    as docstrings are.

    - an item that goes
      on for two lines
    - a second item

        tether job submit web.yaml
        tether job ls
    """
    assert reflow(text).split("\n\n") == [
        "First line.",
        "A paragraph written over three lines as docstrings are.",
        "- an item that goes on for two lines\n- a second item",
        "    tether job submit web.yaml\n    tether job ls",
    ]


def test_tether_up_help_wraps_its_paragraphs_at_80_columns() -> None:
    output = help_of("up")
    description = output[output.index("Starts each service") : output.index("╭")]
    lines = [line.strip() for line in description.strip().splitlines()]
    paragraphs = [p.split("\n") for p in "\n".join(lines).split("\n\n")]
    for paragraph in paragraphs:
        for line in paragraph[:-1]:
            assert len(line) >= 60, f"broken mid-sentence: {line!r}"
    etcd = next(line for line in output.splitlines() if "--etcd" in line)
    assert "<bool>" not in etcd
    assert "<path>" in next(line for line in output.splitlines() if "--dir" in line)


def test_no_command_shows_a_placeholder_for_a_flag() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    ctx = typer.Context(group)
    names = group.list_commands(ctx)
    outputs: dict[tuple[str, ...], str] = {(): help_of()}
    for name in names:
        found = group.get_command(ctx, name)
        outputs[(name,)] = help_of(name)
        if isinstance(found, typer.core.TyperGroup):
            for child in found.list_commands(typer.Context(found)):
                outputs[(name, child)] = help_of(name, child)
    assert len(outputs) > 40
    for words, output in outputs.items():
        assert not re.search(r"<bool>", output), f"tether {' '.join(words)} --help"
