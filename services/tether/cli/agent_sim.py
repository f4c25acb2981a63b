"""`tether agent-sim`: many simulated machines in one process, each a real agent without tasks."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Final

import pydantic
import typer

from tether.agent.harvest import HarvestTraceError, read_trace
from tether.agent.settings import AgentSettings
from tether.agent.simulated import AgentFleet, simulated_machines
from tether.cli.serving import load_settings, serve
from tether.cli.store import StoreUrl
from tether.model import Resources
from tether.model.accelerator import ProfileError, ThroughputProfile
from tether.model.machine import HarvestStep
from tether.region.plan import DATACENTERS, HARDWARE_TYPE, MSBS_PER_DC
from tether.service import connect_store
from tether.store import Store

# The option behind each Machine field that an option can make invalid, for error messages.
_OPTIONS: Final = {
    "id": "--id-prefix",
    "hostname": "--id-prefix",
    "region": "--region",
    "dc": "--dc",
    "hardware_type": "--hardware-type",
}


def agent_sim(
    machines: Annotated[int, typer.Option(min=1, help="Simulated machines (agents).")] = 1000,
    id_prefix: Annotated[
        str, typer.Option(help="Machine ids are PREFIX-<number>, of a fixed width.")
    ] = "sim",
    region: Annotated[str, typer.Option(help="The region the machines belong to.")] = "local",
    dc: Annotated[
        list[str] | None,
        typer.Option(
            help="A datacenter the machines spread over (repeatable); each needs its broker.",
            show_default=", ".join(DATACENTERS),
        ),
    ] = None,
    msbs_per_dc: Annotated[int, typer.Option(min=1, help="MSBs per datacenter.")] = MSBS_PER_DC,
    rack_size: Annotated[int, typer.Option(min=1, help="Machines per rack.")] = 40,
    hardware_type: Annotated[str, typer.Option(help="Every machine's hardware type.")] = (
        HARDWARE_TYPE
    ),
    cpu: Annotated[int, typer.Option(min=1, help="Millicores each machine offers.")] = 32_000,
    memory_mib: Annotated[int, typer.Option(min=1, help="MiB each machine offers.")] = 131_072,
    disk_gib: Annotated[int, typer.Option(min=1, help="GiB of disk each machine offers.")] = 1000,
    gpus: Annotated[int, typer.Option(min=0, help="GPUs each machine offers.")] = 0,
    gpu_type: Annotated[
        list[str] | None,
        typer.Option(
            help="An accelerator type (repeatable): the machines take them in turn as their "
            "gpu_type attribute, e.g. --gpu-type v100 --gpu-type k80.",
        ),
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="A throughput profile (Gavel's isolated_throughputs.json format): tasks of "
            "accelerator jobs make steps at its speed for their machine's type, report them "
            "and exit once done. Without one they run until stopped.",
        ),
    ] = None,
    lease_ttl_s: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="TTL of the heartbeats' lease (TETHER_AGENT_LEASE_TTL_S does not apply): the "
            "agents of a store connection share one, which this process keeps (their heartbeats "
            "vanish together when it dies). At most the region's fencing period, and by default "
            "that period: long, as a lapse costs every agent a new registration at once.",
            show_default="the region's fencing period",
        ),
    ] = None,
    harvest_traces: Annotated[
        Path | None,
        typer.Option(
            help="A directory of capacity traces: a machine with a file <machine id>.jsonl in it "
            "is a harvest machine replaying it (the format of tether agent --harvest-trace; "
            "scripts/harvest_traces.py writes them).",
        ),
    ] = None,
    connections: Annotated[
        int, typer.Option(min=1, help="Store connections the agents share, round-robin.")
    ] = 4,
    work_dir: Annotated[
        Path,
        typer.Option(help="Each agent's work dir is DIR/<machine id> (only host profiles)."),
    ] = Path(".tether/agent-sim"),
    url: str | None = StoreUrl,
    log_level: str = typer.Option(
        "WARNING", "--log-level", help="DEBUG, INFO, WARNING or ERROR (INFO: a line per task)."
    ),
) -> None:
    """Run many simulated machines in this one process until Ctrl-C.

    Each machine is a real agent (heartbeat lease, assignments, host profiles, task statuses)
    whose executor runs no process: an assigned task runs at once, with a made-up pid, until it
    is stopped. The machines heartbeat like any agent, so the brokers register them; they
    spread round-robin over the datacenters and their MSBs, in racks of --rack-size. With
    --profile, a task of an accelerator job makes steps at the profiled speed of its machine's
    --gpu-type, reports them as its progress and exits 0 once it has made them all.
    """
    throughputs = None
    if profile is not None:
        try:
            throughputs = ThroughputProfile.load(profile)
        except ProfileError as error:
            typer.echo(f"error: --profile: {error}", err=True)
            raise typer.Exit(2) from None
    settings = load_settings(
        lambda: AgentSettings(work_dir=work_dir),
        {"work_dir": "--work-dir"},
    )
    try:
        fleet = simulated_machines(
            machines,
            region=region,
            datacenters=dc or list(DATACENTERS),
            msbs_per_dc=msbs_per_dc,
            rack_size=rack_size,
            hardware_type=hardware_type,
            capacity=Resources(cpu=cpu, memory_mib=memory_mib, disk_gib=disk_gib, gpus=gpus),
            prefix=id_prefix,
            gpu_types=gpu_type or (),
        )
    except pydantic.ValidationError as error:
        # Only names can be wrong here: the prefix, a datacenter, the region or hardware type.
        problem = error.errors(include_url=False)[0]
        field = str(problem["loc"][-1])
        typer.echo(f"error: {_OPTIONS.get(field, field)}: {problem['msg']}", err=True)
        raise typer.Exit(2) from None

    traces: dict[str, list[HarvestStep]] = {}
    if harvest_traces is not None:
        if not harvest_traces.is_dir():
            typer.echo(f"error: --harvest-traces: {harvest_traces} is not a directory", err=True)
            raise typer.Exit(2)
        try:
            traces = {
                machine.id: read_trace(path, machine.capacity)
                for machine in fleet
                if (path := harvest_traces / f"{machine.id}.jsonl").exists()
            }
        except HarvestTraceError as error:
            typer.echo(f"error: --harvest-traces: {error}", err=True)
            raise typer.Exit(2) from None

    def make_fleet(store: Store) -> AgentFleet:
        others = [connect_store(url) for _ in range(connections - 1)]
        progress = functools.partial(typer.echo, err=True)
        return AgentFleet(
            fleet,
            settings,
            [store, *others],
            progress=progress,
            profile=throughputs,
            lease_ttl_s=lease_ttl_s,
            harvest=traces,
        )

    serve(make_fleet, url, log_level)
