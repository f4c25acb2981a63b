"""`--help` that reads well at any width: docstrings written hard-wrapped are joined into
paragraphs before the help wraps them again, and flags show no value placeholder."""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence

# Typer vendors Click (0.29): its command type lives only there.
from typer._click import Command, Context, Parameter
from typer.core import TyperGroup, TyperOption

_LIST_ITEM = re.compile(r"^(?:[-*] |\d+[.)] )")


def readable(command: Command) -> Command:
    """`command` (and, for a group, every command it holds now) with its help reflowed and its
    flags shown without a placeholder; returns it."""
    if command.help:
        command.help = reflow(command.help)
    # The help option is made once, when first asked for, and kept: made here, it is the one
    # shown.
    hide_flag_types([*command.params, command.get_help_option(Context(command))])
    if isinstance(command, TyperGroup):
        for child in command.commands.values():
            readable(child)
    return command


def hide_flag_types(params: Sequence[Parameter | None]) -> None:
    """Typer shows a flag's type (`<bool>`) unless it has a metavar: an empty one shows none."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""


def reflow(text: str) -> str:
    """`text` with each paragraph's lines joined, as the help wraps them to the terminal; list
    items stay one a line, and an indented paragraph (an example) stays as it is."""
    return "\n\n".join(_paragraph(p) for p in inspect.cleandoc(text).split("\n\n"))


def _paragraph(paragraph: str) -> str:
    lines = paragraph.split("\n")
    if lines[0][:1].isspace() or any(line.startswith("\b") for line in lines):
        return paragraph
    joined: list[str] = []
    for line in lines:
        if joined and not _LIST_ITEM.match(line):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line.strip())
    return "\n".join(joined)
