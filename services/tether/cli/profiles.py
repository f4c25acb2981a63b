"""`tether profile ls|show|create|rm`: the region's host profiles (admins create and delete)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.table import Table

from tether.cli.common import (
    RegionDirOption,
    TokenOption,
    UrlOption,
    argument_parser,
    client,
    fail,
    out,
    read_document,
)
from tether.cli.listing import Column, Output, OutputOption, print_rows, records
from tether.sdk import JSON, HostProfileView

app = typer.Typer(
    help="Host profiles: the machine settings an entitlement's machines switch to before they "
    "run its tasks.",
    no_args_is_help=True,
)

NameArgument = typer.Argument(..., help="The host profile's name.", show_default=False)


@dataclass(frozen=True, slots=True)
class Setting:
    """One `--setting KEY=VALUE`."""

    key: str
    value: str


def parse_setting(text: str) -> Setting:
    """`KEY=VALUE` (the value may hold '=' and be empty; the key may not)."""
    key, equals, value = text.partition("=")
    if not equals or not key:
        raise ValueError(f"'{text}' is not KEY=VALUE, such as hugepages=2048")
    return Setting(key, value)


@app.command("ls")
def list_profiles(
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """List host profiles: how long a switch to each takes and what it sets."""
    with client(url, token, region_dir) as tether:
        profiles = tether.list_host_profiles()
    print_rows(profiles, PROFILE_COLUMNS, output, empty="no host profiles")


PROFILE_COLUMNS: list[Column[HostProfileView]] = [
    Column("name", lambda profile: profile.name, whole=True),
    Column("switch s", lambda profile: f"{profile.switch_seconds:g}", justify="right"),
    Column("settings", lambda profile: ", ".join(sorted(profile.settings)) or "-"),
    Column("description", lambda profile: profile.description, give_way=1),
]


@app.command()
def show(
    name: str = NameArgument,
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Show one host profile and its settings."""
    with client(url, token, region_dir) as tether:
        profile = tether.get_host_profile(name)
    if not records(output, profile):
        _print_profile(profile)


@app.command()
def create(
    name: str | None = typer.Argument(
        None, help="The profile's name.", show_default="the file's name"
    ),
    file: Path | None = typer.Option(
        None,
        "--file",
        "-f",
        exists=True,
        dir_okay=False,
        readable=True,
        help="The profile's fields as YAML (.yaml, .yml) or JSON (.json); the options below "
        "override them.",
    ),
    description: str | None = typer.Option(None, "--description", help="What it is for."),
    settings: list[Setting] | None = typer.Option(
        None,
        "--setting",
        parser=argument_parser(parse_setting),
        metavar="KEY=VALUE",
        help="A setting handed to the agent's profile hook (repeat for more).",
        show_default=False,
    ),
    switch_seconds: float | None = typer.Option(
        None,
        "--switch-seconds",
        metavar="SECONDS",
        help="The least time a switch to it takes, hook included.",
    ),
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Create a host profile from options, a file, or both. A name is used once: to change a
    profile, delete it (once nothing uses it) and create it again. Needs the admin role."""
    profile = _load(file) if file is not None else {}
    if name is not None:
        if profile.get("name", name) != name:
            fail(f"{file} names the profile '{profile['name']}', the command '{name}'")
        profile["name"] = name
    if "name" not in profile:
        fail("name the profile: tether profile create NAME, or a --file with a name")
    if description is not None:
        profile["description"] = description
    if settings:
        given = profile.get("settings", {})
        if not isinstance(given, dict):
            fail(f"{file}: settings must be a mapping of KEY: VALUE")
        profile["settings"] = given | {setting.key: setting.value for setting in settings}
    if switch_seconds is not None:
        profile["switch_seconds"] = switch_seconds
    with client(url, token, region_dir) as tether:
        created = tether.create_host_profile(profile)
    out().print(f"host profile {created.name} created")
    _print_profile(created)


@app.command("rm")
def remove(
    name: str = NameArgument,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Delete a host profile. Refused, naming them, while an entitlement names it, a machine
    carries it or is asked to switch to it. Needs the admin role."""
    with client(url, token, region_dir) as tether:
        deleted = tether.delete_host_profile(name)
    out().print(f"host profile {deleted.name} deleted")


def _load(file: Path) -> dict[str, Any]:
    """The fields the file holds; a file that is not one JSON or YAML mapping ends the
    command."""
    body, content_type = read_document(file)
    try:
        data = json.loads(body) if content_type == JSON else yaml.safe_load(body)
        # It is sent as JSON: YAML's dates and sets have no JSON form.
        json.dumps(data)
    except (ValueError, TypeError, yaml.YAMLError) as exc:
        fail(f"cannot read a profile from {file}: {exc}")
    if not isinstance(data, dict):
        fail(f"{file} must hold one profile: a mapping of its fields")
    return data


def _print_profile(profile: HostProfileView) -> None:
    fields = Table.grid(padding=(0, 2))
    for label, value in (
        ("name", profile.name),
        ("description", profile.description or "-"),
        ("switch", f"{profile.switch_seconds:g} s"),
    ):
        fields.add_row(f"[bold]{label}[/bold]", value)
    console = out()
    console.print(fields)
    if not profile.settings:
        console.print("no settings")
        return
    table = Table("setting", "value")
    for key, value in sorted(profile.settings.items()):
        table.add_row(key, value)
    console.print(table)
