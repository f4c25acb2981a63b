"""`tether agent`: run the agent of one machine, which runs the tasks assigned to it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Final

import pydantic
import typer

from tether.agent.harvest import HarvestTraceError, read_trace
from tether.agent.service import Agent
from tether.agent.settings import AgentSettings
from tether.cli.serving import LogLevel, load_settings, metrics_port_option, serve
from tether.cli.store import StoreUrl
from tether.model import Machine

GIB: Final = 1024**3
MIB: Final = 1024**2

# Where each Machine field comes from on the command line, for error messages.
_OPTIONS: Final = {
    "id": "--machine-id",
    "hostname": "--hostname",
    "region": "--region",
    "dc": "--dc",
    "msb": "--msb",
    "rack": "--rack",
    "hardware_type": "--hardware-type",
    "cpu": "--cpu",
    "memory_mib": "--memory-mib",
    "disk_gib": "--disk-gib",
    "gpus": "--gpus",
    "attributes": "--attribute",
}


def parse_attributes(pairs: list[str]) -> dict[str, str]:
    """`KEY=VALUE` options as a dict; the model checks the keys and values themselves."""
    attributes: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="'--attribute'")
        if key in attributes:
            raise typer.BadParameter(f"{key!r} is given twice", param_hint="'--attribute'")
        attributes[key] = value
    return attributes


def build_machine(fields: dict[str, Any]) -> Machine:
    """The Machine the options describe; exits 2 naming the option of every invalid value."""
    try:
        return Machine.model_validate(fields)
    except pydantic.ValidationError as error:
        for problem in error.errors(include_url=False):
            # The innermost known field names the option: ("capacity", "cpu") is --cpu.
            names = [str(part) for part in problem["loc"]]
            option = next((_OPTIONS[n] for n in reversed(names) if n in _OPTIONS), names[0])
            if option == "--attribute" and len(names) > 1:
                option = f"--attribute {names[1]}"
            typer.echo(f"error: {option}: {problem['msg']}", err=True)
        raise typer.Exit(2) from None


def _memory_mib() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB


def agent(
    machine_id: str = typer.Option(..., "--machine-id", help="This machine's id (a DNS label)."),
    hostname: str | None = typer.Option(None, help="Host name; default: the machine id."),
    region: str = typer.Option("local", help="The region the machine belongs to."),
    dc: str = typer.Option("dc1", help="Datacenter."),
    msb: str = typer.Option("msb1", help="Main switchboard (power domain) within the DC."),
    rack: str = typer.Option("rack1", help="Rack within the MSB."),
    hardware_type: str = typer.Option("local", help="Hardware type jobs can ask for."),
    cpu: int | None = typer.Option(
        None, min=0, help="Millicores offered.", show_default="1000 per CPU"
    ),
    memory_mib: int | None = typer.Option(
        None, min=0, help="Memory offered, MiB.", show_default="the machine's RAM"
    ),
    disk_gib: int | None = typer.Option(
        None, min=0, help="Disk offered, GiB.", show_default="the current file system"
    ),
    gpus: int = typer.Option(0, min=0, help="GPUs offered."),
    attribute: list[str] = typer.Option(
        [], "--attribute", help="A machine attribute KEY=VALUE (repeatable)."
    ),
    work_dir: Path | None = typer.Option(
        None,
        help="Where task files, logs and sandboxes live (else TETHER_AGENT_WORK_DIR).",
        show_default=".tether/agents/<machine id>",
    ),
    harvest_trace: Path | None = typer.Option(
        None,
        "--harvest-trace",
        help="Make this a harvest machine that replays the capacity trace FILE: JSON Lines of "
        '{"at_s": seconds after start, "usable": {"cpu": ..., ...}, "evict_in_s": seconds}; '
        "tasks that no longer fit move off with notice.",
        show_default=False,
    ),
    metrics_port: int = metrics_port_option("agent"),
    url: str | None = StoreUrl,
    log_level: str = LogLevel,
) -> None:
    """Run the agent of one machine: heartbeat, run its assigned tasks, serve their logs."""
    overrides: dict[str, Any] = {} if work_dir is None else {"work_dir": work_dir}
    sources = {field: f"TETHER_AGENT_{field.upper()}" for field in AgentSettings.model_fields}
    settings = load_settings(
        lambda: AgentSettings(**overrides), sources | {"work_dir": "--work-dir"}
    )
    machine = build_machine(
        {
            "id": machine_id,
            "hostname": hostname or machine_id,
            "topology": {"region": region, "dc": dc, "msb": msb, "rack": rack},
            "hardware_type": hardware_type,
            "capacity": {
                "cpu": (os.cpu_count() or 1) * 1000 if cpu is None else cpu,
                "memory_mib": _memory_mib() if memory_mib is None else memory_mib,
                "disk_gib": shutil.disk_usage(Path.cwd()).total // GIB
                if disk_gib is None
                else disk_gib,
                "gpus": gpus,
            },
            "attributes": parse_attributes(attribute),
        }
    )
    try:
        steps = [] if harvest_trace is None else read_trace(harvest_trace, machine.capacity)
    except HarvestTraceError as error:
        typer.echo(f"error: --harvest-trace: {error}", err=True)
        raise typer.Exit(2) from None
    serve(
        lambda store: Agent(machine, settings, store, harvest=steps), url, log_level, metrics_port
    )
