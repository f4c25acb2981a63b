"""`tether appsched`: run a reference application-level scheduler (rolling, replicas, gang) or
Gavel's rounds (gavel)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import typer

from tether.cli.common import TOKEN_HINT, TokenOption, UrlOption, client, fail
from tether.cli.serving import LogLevel, load_settings
from tether.config import TlsSettings
from tether.model import check_name, parse_job_handle
from tether.model.accelerator import ThroughputProfile
from tether.region.plan import RegionOptions
from tether.region.supervisor import port_is_free
from tether.sdk import ClientSettings
from tether.sdk.settings import local_region
from tether.service import configure_logging
from tether.taskcontrol.appsched.base import ReferenceController
from tether.taskcontrol.appsched.gang import GangController
from tether.taskcontrol.appsched.gavel.controller import GavelController
from tether.taskcontrol.appsched.gavel.policies.registry import POLICIES
from tether.taskcontrol.appsched.gavel.rounds import ROUND_S
from tether.taskcontrol.appsched.gavel.runner import GavelRunner
from tether.taskcontrol.appsched.replicas import (
    FETCH_TIMEOUT_S,
    ReplicasController,
    ShardMap,
    ShardMapEndpoint,
    ShardMapError,
    read_shard_map,
)
from tether.taskcontrol.appsched.rolling import MaxUnavailable, RollingController

app = typer.Typer(
    help="Run a reference application-level scheduler: it serves TaskController, registers "
    "with the region's TaskControllerRegistry for one job (--job) or every job of an "
    "entitlement (--entitlement), approves the disruptive operations its rule allows, and "
    "unregisters on Ctrl-C. It logs (on stderr) the address it serves on, its registration id "
    "and every decision.",
    no_args_is_help=True,
)

RegistryOption = typer.Option(
    None,
    "--registry",
    metavar="HOST:PORT",
    help="The region's TaskControllerRegistry (gRPC).",
    show_default="the registry_address in .tether/region.json, else 127.0.0.1:8081",
)
JobOption = typer.Option(
    None,
    "--job",
    metavar="HANDLE",
    help="Control this job, <entitlement>/<job>. Give --job or --entitlement.",
)
EntitlementOption = typer.Option(
    None,
    "--entitlement",
    metavar="NAME",
    help="Control every job of this entitlement (a controller registered for the job itself "
    "takes precedence). Give --job or --entitlement.",
)
ListenOption = typer.Option(
    "127.0.0.1:0",
    "--listen",
    metavar="HOST:PORT",
    help="Where to serve TaskController: Tether's schedulers call this address. Port 0 picks a "
    "free one.",
)
TtlOption = typer.Option(
    0,
    "--ttl",
    min=0,
    metavar="SECONDS",
    help="Lifetime of the registration, renewed every third of it; 0 asks for the registry's "
    "default (15 s). A controller that dies is forgotten one TTL later.",
)


@dataclass(frozen=True, slots=True)
class Registration:
    """Where to serve and what to register for, checked."""

    listen: str
    registry: str
    token: str
    job_handle: str
    entitlement: str
    ttl_s: int


def default_registry_address() -> str:
    """The registry of the region in TETHER_REGION_DIR (else .tether), as `tether up` recorded
    it, else `tether up`'s default."""
    region = local_region(ClientSettings().region_dir)
    if region is not None:
        return region.registry_address
    return f"{RegionOptions.host}:{RegionOptions.registry_port}"


def _registration(
    job: str | None,
    entitlement: str | None,
    listen: str,
    registry: str | None,
    token: str | None,
    ttl_s: int,
) -> Registration:
    """The common options, checked before anything starts; a problem ends the command."""
    if (job is None) == (entitlement is None):
        fail("give exactly one of --job <entitlement>/<job> and --entitlement NAME")
    try:
        if job is not None:
            parse_job_handle(job)
        elif entitlement is not None:
            check_name(entitlement, "entitlement")
    except ValueError as error:
        fail(str(error))
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        fail(f"--listen {listen!r}: expected HOST:PORT (port 0 picks a free one)")
    if not port_is_free(host, int(port)):
        fail(f"cannot listen on {listen}: the port is in use or the host is not this machine")
    if not token:
        default = ClientSettings().token
        if default is None:
            fail(f"no token: {TOKEN_HINT}")
        token = default.get_secret_value()
    return Registration(
        listen=listen,
        registry=registry or default_registry_address(),
        token=token,
        job_handle=job or "",
        entitlement=entitlement or "",
        ttl_s=ttl_s,
    )


def _serve(controller: ReferenceController, registration: Registration, log_level: str) -> None:
    """Runs `controller` until SIGINT or SIGTERM; a refused registration ends the command."""
    configure_logging(log_level)
    # --shard-map-url makes a request per call: httpx's own line for each would drown the
    # decisions.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    tls = load_settings(TlsSettings, {})
    try:
        controller.run(
            registration.listen,
            registration.registry,
            registration.token,
            job_handle=registration.job_handle,
            entitlement=registration.entitlement,
            ttl_s=registration.ttl_s,
            tls=tls,
        )
    except grpc.aio.AioRpcError as error:
        code = error.code()
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            fail(
                f"cannot reach the TaskController registry at {registration.registry}: "
                f"{code.name}: {error.details()}",
                ["hint: is the region up? pass --registry HOST:PORT for another one"],
            )
        hints = [f"hint: {TOKEN_HINT}"] if code is grpc.StatusCode.UNAUTHENTICATED else []
        fail(
            f"the TaskController registry at {registration.registry} refused the registration: "
            f"{code.name}: {error.details()}",
            hints,
        )


@app.command()
def rolling(
    max_unavailable: str = typer.Option(
        "10%",
        "--max-unavailable",
        metavar="COUNT|PERCENT%",
        help="The most tasks of a job that may be down at once, counting unhealthy ones: a "
        "number of tasks (3) or a percentage of the job's tasks (10%, rounded down, at least 1).",
    ),
    job: str | None = JobOption,
    entitlement: str | None = EntitlementOption,
    registry: str | None = RegistryOption,
    listen: str = ListenOption,
    ttl: int = TtlOption,
    token: str | None = TokenOption,
    log_level: str = LogLevel,
) -> None:
    """Approve operations oldest first while at most --max-unavailable tasks are down.

    Down means unhealthy, or of an operation approved earlier that Tether has not reported
    done yet."""
    try:
        limit = MaxUnavailable.parse(max_unavailable)
    except ValueError as error:
        fail(f"--max-unavailable: {error}")
    registration = _registration(job, entitlement, listen, registry, token, ttl)
    _serve(RollingController(limit), registration, log_level)


@app.command()
def replicas(
    shard_map: Path | None = typer.Option(
        None,
        "--shard-map",
        metavar="PATH",
        help='A JSON file naming the tasks that hold each shard\'s replicas: {"shards": '
        '{"<shard>": <list of task indexes>}}. Read once, at start.',
    ),
    shard_map_url: str | None = typer.Option(
        None,
        "--shard-map-url",
        metavar="URL",
        help="The application's HTTP endpoint serving the same JSON, read again on every call "
        f"(timeout {FETCH_TIMEOUT_S:g} s). When it fails, the last map read is used; before the "
        "first one, nothing is approved.",
    ),
    max_down_per_shard: int = typer.Option(
        1,
        "--max-down-per-shard",
        min=1,
        help="The most replicas of any one shard that may be down at once, counting unhealthy "
        "tasks.",
    ),
    job: str | None = JobOption,
    entitlement: str | None = EntitlementOption,
    registry: str | None = RegistryOption,
    listen: str = ListenOption,
    ttl: int = TtlOption,
    token: str | None = TokenOption,
    log_level: str = LogLevel,
) -> None:
    """Approve operations while no shard has more than --max-down-per-shard replicas down.

    For sharded stateful services. Give --shard-map or --shard-map-url. Operations on shards with
    no replica down go first, and as many as fit are approved at once."""
    registration = _registration(job, entitlement, listen, registry, token, ttl)
    controller = ReplicasController(_shard_map_source(shard_map, shard_map_url), max_down_per_shard)
    _serve(controller, registration, log_level)


def _shard_map_source(path: Path | None, url: str | None) -> ShardMap | ShardMapEndpoint:
    """The map from --shard-map, or the endpoint of --shard-map-url; a problem ends the command."""
    if path is not None and url is None:
        try:
            return read_shard_map(path)
        except ShardMapError as error:
            fail(str(error))
    if url is not None and path is None:
        try:
            scheme = httpx.URL(url).scheme
        except httpx.InvalidURL:
            scheme = ""
        if scheme not in ("http", "https"):
            fail(f"--shard-map-url {url!r}: expected an http:// or https:// URL")
        return ShardMapEndpoint(url)
    fail("give exactly one of --shard-map PATH and --shard-map-url URL")


@app.command()
def gang(
    job: str | None = JobOption,
    entitlement: str | None = EntitlementOption,
    registry: str | None = RegistryOption,
    listen: str = ListenOption,
    ttl: int = TtlOption,
    token: str | None = TokenOption,
    log_level: str = LogLevel,
) -> None:
    """Approve a training job's operations only all together, so that its tasks restart at once.

    Approves every pending operation once together they cover every task of the job and none
    approved earlier is still in progress; otherwise none. An operation with a deadline (planned
    maintenance) is executed at its deadline regardless."""
    registration = _registration(job, entitlement, listen, registry, token, ttl)
    _serve(GangController(), registration, log_level)


@app.command()
def gavel(
    entitlement: str = typer.Option(
        ...,
        "--entitlement",
        metavar="NAME",
        help="Schedule this entitlement's accelerator jobs (those with `accelerator` in their "
        "spec), and serve as its TaskController.",
    ),
    policy: str = typer.Option(
        "max_min_fairness_perf",
        "--policy",
        help=f"The allocation policy: {', '.join(sorted(POLICIES))}.",
    ),
    profile: str = typer.Option(
        ...,
        "--profile",
        metavar="PATH|ENTITLEMENT/NAME",
        help="Throughputs of each job type on each accelerator type, in the format of Gavel's "
        "isolated_throughputs.json: a file, or else a throughput profile kept in the region "
        "(PUT /v1/throughput-profiles/ENTITLEMENT/NAME). Corrected by the steps jobs report "
        "as they run.",
    ),
    round_s: float = typer.Option(
        ROUND_S, "--round-s", min=1.0, help="Seconds per round (Gavel's 6 minutes by default)."
    ),
    accelerators: str | None = typer.Option(
        None,
        "--accelerators",
        metavar="TYPE=N,...",
        help="The GPUs the entitlement's jobs share, by type: v100=8,k80=16.",
        show_default="the GPUs of the region's machines that are up, by their gpu_type",
    ),
    stop_timeout_s: float = typer.Option(
        120.0,
        "--stop-timeout-s",
        min=1.0,
        help="How long a round waits for the jobs it suspended to stop (their tasks have the "
        "entitlement's grace to checkpoint) before it starts the chosen ones anyway.",
    ),
    url: str | None = UrlOption,
    registry: str | None = RegistryOption,
    listen: str = ListenOption,
    ttl: int = TtlOption,
    token: str | None = TokenOption,
    log_level: str = LogLevel,
) -> None:
    """Gavel's heterogeneity-aware rounds over an entitlement's accelerator jobs.

    Every --round-s the policy's allocation (solved again when jobs come, go or run at another
    speed than the profile says) chooses the jobs to run and their accelerator type; jobs that
    leave their type are suspended (their tasks stop together) and the chosen ones resumed with
    a gpu_type constraint. Submit accelerator jobs suspended: the rounds start them."""
    if policy not in POLICIES:
        fail(f"--policy {policy!r}: expected one of {', '.join(sorted(POLICIES))}")
    counts = _accelerator_counts(accelerators) if accelerators is not None else None
    registration = _registration(None, entitlement, listen, registry, token, ttl)
    with client(url, registration.token, None) as tether:
        path = Path(profile)
        try:
            if path.exists() or path.suffix == ".json" or "/" not in profile:
                throughputs = ThroughputProfile.load(path)
            else:
                kept = tether.get_throughput_profile(profile)
                throughputs = ThroughputProfile.parse(kept["throughputs"], source=profile)
        except ValueError as error:  # ProfileError too
            fail(f"--profile: {error}")
        try:
            runner = GavelRunner(
                tether,
                entitlement,
                policy,
                throughputs,
                round_s=round_s,
                accelerators=counts,
                stop_timeout_s=stop_timeout_s,
            )
        except ValueError as error:
            fail(str(error))
        _serve(GavelController(runner), registration, log_level)


def _accelerator_counts(text: str) -> dict[str, int]:
    """`v100=8,k80=16` as counts; a malformed one ends the command."""
    counts: dict[str, int] = {}
    for part in text.split(","):
        kind, _, number = part.partition("=")
        if not kind.strip() or not number.strip().isdigit():
            fail(f"--accelerators {text!r}: expected TYPE=N,... (v100=8,k80=16)")
        counts[kind.strip()] = int(number)
    return counts
