"""Every choice the CLI offers is one the server accepts: the CLI never offers what the server
refuses, and a new option with choices must say here how the server checks it."""

from __future__ import annotations

import enum
import json
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pydantic
import pytest
import typer

from tether.cli.listing import Output
from tether.cli.main import app
from tether.frontend.api.tasks import task_logs
from tether.frontend.schemas.maintenance import MaintenanceRequest
from tether.model import MaintenanceKind

LOCAL_CHOICES: frozenset[type[enum.Enum]] = frozenset({Output})
"""Choices the CLI keeps to itself (how it prints), never sent to the server."""


def choice_options(
    command: Any, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, type[enum.Enum]]]:
    """(`<command path> <option>`, its enum) for every option of the CLI that takes a choice
    the server sees."""
    for name, sub in getattr(command, "commands", {}).items():
        yield from choice_options(sub, (*path, name))
    for param in command.params:
        annotation = param.type_descriptor.annotation
        if (
            isinstance(annotation, type)
            and issubclass(annotation, enum.Enum)
            and annotation not in LOCAL_CHOICES
        ):
            yield " ".join((*path, param.opts[0])), annotation


def accepted_as_maintenance_kind(value: str) -> None:
    """As the frontend reads a POST /v1/maintenance body."""
    body = {"machines": ["m1"], "duration_s": 60, "kind": value}
    MaintenanceRequest.model_validate_json(json.dumps(body))


def accepted_as_log_stream(value: str) -> None:
    """As the frontend reads the `stream` query parameter of a task's logs."""
    hint = typing.get_type_hints(task_logs, include_extras=True)["stream"]
    pydantic.TypeAdapter(hint).validate_python(value)


SERVER_CHECKS: dict[str, Callable[[str], None]] = {
    "maintenance schedule --kind": accepted_as_maintenance_kind,
    "task logs --stream": accepted_as_log_stream,
}
"""How the server validates what each option with choices sends (raises when it refuses)."""

OFFERED = dict(choice_options(typer.main.get_command(app)))


def test_every_option_with_choices_is_checked_against_the_server() -> None:
    assert set(OFFERED) == set(SERVER_CHECKS)


@pytest.mark.parametrize(
    ("option", "value"),
    [(option, member.value) for option, choices in OFFERED.items() for member in choices],
)
def test_the_server_accepts_every_choice_the_cli_offers(option: str, value: str) -> None:
    SERVER_CHECKS[option](value)


def test_the_maintenance_kinds_the_cli_leaves_out_are_the_ones_the_server_refuses() -> None:
    offered = {member.value for member in OFFERED["maintenance schedule --kind"]}
    for kind in MaintenanceKind:
        if kind.value in offered:
            continue
        with pytest.raises(pydantic.ValidationError, match="not planned maintenance"):
            accepted_as_maintenance_kind(kind.value)
    assert offered
