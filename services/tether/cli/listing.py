"""How the verbs print what they list: a table fitting the terminal, every column, JSON or YAML."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

import typer
import yaml
from pydantic import BaseModel
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from tether.cli.common import out

Row = TypeVar("Row")

_UNBOUNDED = 100_000
"""A console width no table reaches, to measure one unwrapped."""


class Output(StrEnum):
    """What `-o` chooses."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"


OutputOption = typer.Option(
    Output.TABLE,
    "--output",
    "-o",
    case_sensitive=False,
    help="table: the columns that fit the terminal; wide: every column, however wide; json or "
    "yaml: the API's records, whole, for scripts.",
)


@dataclass(frozen=True)
class Column(Generic[Row]):
    """One column of a listing's table."""

    header: str
    cell: Callable[[Row], str]
    give_way: int | None = None
    """The order in which the column leaves a table too wide for the terminal (1 first); None:
    it always stays. Every column shows in `-o wide`."""
    wide_only: bool = False
    """Shown only in `-o wide`."""
    whole: bool = False
    """Never wrapped or cut (handles and names, which a user copies)."""
    markup: bool = False
    """The cells are Rich markup (a colour for a state); others are shown as they are, so that
    a message like `[/tmp/x]` is text."""
    justify: Literal["left", "right"] = "left"


def records(output: Output, data: Any) -> bool:
    """Print `data` (a model, or a list or dict of them) as JSON or YAML when `output` asks for
    that, and say whether it did; a table is the caller's to print."""
    if output not in (Output.JSON, Output.YAML):
        return False
    plain = _plain(data)
    if output is Output.JSON:
        typer.echo(json.dumps(plain, indent=2))
    else:
        typer.echo(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True), nl=False)
    return True


def print_rows(
    rows: Sequence[Row],
    columns: Sequence[Column[Row]],
    output: Output,
    *,
    empty: str,
    title: str | None = None,
) -> None:
    """Print `rows` as `output` asks: their records as JSON or YAML (rows must be models), or a
    table of `columns`, printing `empty` instead of a table with no rows."""
    if records(output, list(rows)):
        return
    console = out()
    if not rows:
        console.print(empty)
        return
    print_table(console, rows, columns, output, title=title)


def print_table(
    console: Console,
    rows: Sequence[Row],
    columns: Sequence[Column[Row]],
    output: Output,
    *,
    title: str | None = None,
) -> None:
    """Print the table of `rows`: in `-o wide` every column at its natural width; otherwise the
    columns that fit, dropping them in their `give_way` order."""
    cells = [[column.cell(row) for column in columns] for row in rows]
    if output is Output.WIDE:
        table = _table(columns, cells, list(range(len(columns))), title)
        # Wide output is as wide as it needs: lines run past the terminal rather than wrap.
        _print_within(console, table, _measure(table).maximum)
        return
    shown = [index for index, column in enumerate(columns) if not column.wide_only]
    leaving = sorted(
        (index for index in shown if columns[index].give_way is not None),
        key=lambda index: columns[index].give_way or 0,
    )
    table = _table(columns, cells, shown, title)
    while leaving and _measure(table).maximum > console.width:
        shown.remove(leaving.pop(0))
        table = _table(columns, cells, shown, title)
    # Columns that stay wrap at word boundaries; a line runs past a terminal too narrow for
    # that rather than cut a handle.
    _print_within(console, table, _measure(table).minimum)


def _print_within(console: Console, table: Table, least_width: int) -> None:
    """Print `table` in the terminal's width, or in `least_width` when that is wider."""
    if least_width > console.width:
        console.width = least_width
    console.print(table)


def _table(
    columns: Sequence[Column[Any]], cells: list[list[str]], shown: list[int], title: str | None
) -> Table:
    table = Table(title=title)
    for index in shown:
        column = columns[index]
        widest = max((len(row[index]) for row in cells), default=0) if column.whole else None
        table.add_column(
            column.header, justify=column.justify, no_wrap=column.whole, min_width=widest
        )
    for row in cells:
        table.add_row(
            *(row[index] if columns[index].markup else Text(row[index]) for index in shown)
        )
    return table


def _measure(table: Table) -> Measurement:
    """The widths `table` takes: when nothing wraps (maximum), and when every column wraps at
    word boundaries (minimum)."""
    return Console(width=_UNBOUNDED).measure(table)


def _plain(data: Any) -> Any:
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, list | tuple):
        return [_plain(item) for item in data]
    if isinstance(data, dict):
        return {key: _plain(value) for key, value in data.items()}
    return data
