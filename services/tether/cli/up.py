"""`tether up` and `tether down`: run a whole region on this machine."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Final, NoReturn

import typer
from pydantic import Field, ValidationError
from rich.markup import escape

from tether.agent.cleanup import stop_tasks
from tether.cli.common import err, fail
from tether.metrics_server import MetricsSettings
from tether.model import (
    DEFAULT_FENCING_S,
    DEFAULT_NON_PREEMPTIBLE_PRIORITY,
    DEFAULT_STATE_DIR,
    REGION_FILE_NAME,
    RegionState,
    RegionStateError,
    Resources,
    TetherModel,
    from_json,
    read_region_state,
    to_json,
    write_region_state,
)
from tether.region.bootstrap import BootstrapResult, bootstrap_region
from tether.region.certs import LOCAL_HOSTS, CertsError, ensure_certs
from tether.region.plan import (
    FRONTEND_PORT_STEP,
    RegionOptions,
    default_entitlement,
    region_processes,
    shard_ids,
)
from tether.region.restarts import RestartPolicy
from tether.region.supervisor import (
    RegionError,
    Supervisor,
    last_lines,
    port_is_free,
    process_alive,
    wait_until_ready,
)
from tether.store import open_store
from tether.store.etcd_server import ClientTls, EtcdServer

_RESTARTS: Final = RestartPolicy()
"""How `tether up` restarts services (`--restart`)."""


class _Stop(Exception):
    """SIGTERM or SIGINT arrived: stop the region."""


class _StopRequest:
    """Records that SIGTERM or SIGINT arrived; `check()` raises `_Stop` once one has. The
    handler raises nothing itself: an exception raised in a signal handler lands wherever the
    main thread is, and Python ignores one that lands in an at-fork hook (while a service is
    being started), after which the region would never stop."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def record(self, signum: int, _frame: object) -> None:
        self.signal = signum

    def check(self) -> None:
        if self.signal is not None:
            raise _Stop


def up(
    state_dir: Annotated[
        Path,
        typer.Option(
            "--dir",
            "--region-dir",
            envvar="TETHER_REGION_DIR",
            help="Where the region keeps its store, logs and token; other commands find it "
            "with --region-dir or TETHER_REGION_DIR.",
        ),
    ] = DEFAULT_STATE_DIR,
    store: Annotated[
        str | None,
        typer.Option(
            help="Use this store instead of the embedded SQLite file, e.g. etcd://127.0.0.1:2379.",
        ),
    ] = None,
    etcd: Annotated[
        bool, typer.Option("--etcd", help="Start a local etcd server (data in DIR/etcd).")
    ] = False,
    agents: Annotated[
        int,
        typer.Option(
            min=0,
            max=64,
            help="Local agents (machines); 0 for a region whose agents run elsewhere (tether "
            "agent or agent-sim on the same store).",
        ),
    ] = 4,
    agent_cpu: Annotated[int, typer.Option(min=1, help="Millicores each agent offers.")] = 4000,
    agent_memory_mib: Annotated[int, typer.Option(min=1, help="MiB each agent offers.")] = 4096,
    host: Annotated[str, typer.Option(help="Address of the REST API.")] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            min=1,
            max=65535,
            help=f"Port of the REST API; frontend k listens on PORT+{FRONTEND_PORT_STEP}k.",
        ),
    ] = 8080,
    frontends: Annotated[
        int,
        typer.Option(
            min=1, max=16, help="Frontends, each its own process serving the same REST API."
        ),
    ] = 1,
    shards: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="Scheduler shards of a new region, each with a leader and a standby (a resumed "
            "region keeps its own).",
        ),
    ] = 2,
    registry_port: Annotated[
        int,
        typer.Option(
            min=1, max=65535, help="Port of the TaskController registry (gRPC), on --host."
        ),
    ] = 8081,
    fencing_s: Annotated[
        float,
        typer.Option(
            min=1,
            help="Fencing period of a new region's at-most-once tasks: an agent cut off from the "
            "store this long kills them, and they run elsewhere only after it (a resumed region "
            "keeps its own).",
        ),
    ] = DEFAULT_FENCING_S,
    non_preemptible_priority: Annotated[
        int,
        typer.Option(
            min=0,
            max=1001,
            help="Jobs of a new region at this priority or above (the production band) are "
            "never preempted; 1001 protects none (a resumed region keeps its own).",
        ),
    ] = DEFAULT_NON_PREEMPTIBLE_PRIORITY,
    restart: Annotated[
        bool,
        typer.Option(
            "--restart/--no-restart",
            help=f"Start a service that fails again, after a backoff "
            f"({_RESTARTS.backoff_initial_s:g} s, doubling up to {_RESTARTS.backoff_max_s:g} s); "
            f"give up on one that fails {_RESTARTS.give_up_after} times in a row within "
            f"{_RESTARTS.fast_s:g} s of starting.",
        ),
    ] = True,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="Serve every endpoint over TLS, and mutual TLS between the services, with the "
            "region's own CA and a certificate per service (made in DIR/tls on first use).",
        ),
    ] = False,
    ready_timeout_s: Annotated[
        float, typer.Option(min=1, help="Give up if the region is not ready in this time.")
    ] = 120.0,
    log_level: Annotated[str, typer.Option(help="Log level of every service.")] = "INFO",
) -> None:
    """Start a whole region on this machine and run it until Ctrl-C.

    Starts each service as its own process (2 allocators, a broker per datacenter, the health
    checker, the scheduler shards with a leader and a standby each, the agents, the
    TaskController registry, the frontends), each logging to DIR/logs/. Running it again with
    the same DIR resumes the region: jobs come back and running tasks are re-adopted. Ctrl-C
    stops every service; task processes keep running until the next `tether up` adopts them
    (`tether down --tasks` stops them too).
    """
    console = err()
    if store and etcd:
        _usage_error("--store and --etcd exclude each other: use an existing etcd, or start one")
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    state_path = state_dir / REGION_FILE_NAME
    try:
        previous = read_region_state(state_path)
    except RegionStateError as error:
        # Left by a `tether up` that did not stop cleanly, or edited: this run writes it anew.
        console.print(f"[yellow]warning:[/] {escape(str(error))}; replacing it", soft_wrap=True)
        previous = None
    if previous is not None and process_alive(previous.pid):
        _usage_error(
            f"a region is already running from {state_dir} (pid {previous.pid}); "
            "stop it: tether down"
        )
    frontend_ports = [port + FRONTEND_PORT_STEP * k for k in range(frontends)]
    taken = next((p for p in frontend_ports if p > 65535 or not port_is_free(host, p)), None)
    if taken is not None:
        _usage_error(f"port {taken} on {host} (for a frontend) is not free; choose another --port")
    if registry_port in frontend_ports or not port_is_free(host, registry_port):
        _usage_error(
            f"port {registry_port} on {host} is in use; choose another with --registry-port"
        )

    options = RegionOptions(
        state_dir=state_dir,
        store_url=store or f"sqlite:///{state_dir / 'store.db'}",
        agents=agents,
        agent_capacity=Resources(cpu=agent_cpu, memory_mib=agent_memory_mib, disk_gib=20),
        host=host,
        port=port,
        registry_port=registry_port,
        frontends=frontends,
        shards=shard_ids(shards),
        fencing_s=fencing_s,
        non_preemptible_priority=non_preemptible_priority,
        log_level=log_level,
        tls=tls,
        store_tls=tls and etcd,
    )
    if tls:
        try:
            ensure_certs(options.tls_dir, [] if host in LOCAL_HOSTS else [host])
        except (CertsError, OSError) as error:
            _usage_error(f"cannot make the region's certificates in {options.tls_dir}: {error}")
    etcd_server = _start_etcd(state_dir, options.etcd_tls) if etcd else None
    if etcd_server:
        options = dataclasses.replace(options, store_url=etcd_server.url)
    store_url = options.store_url
    supervisor = Supervisor(
        options,
        env={**os.environ, "TETHER_STORE": store_url},
        policy=_RESTARTS if restart else None,
    )
    metrics_host = MetricsSettings().host
    stop = _StopRequest()
    signal.signal(signal.SIGTERM, stop.record)
    signal.signal(signal.SIGINT, stop.record)
    try:
        supervisor.prepare()
        result = asyncio.run(_bootstrap(options))
        stop.check()
        options = dataclasses.replace(options, shards=tuple(result.config.shards))
        console.print(
            f"{'Created' if result.created else 'Resuming'} region [bold]{result.config.name}"
            f"[/] in {state_dir} (store {store_url})"
        )
        supervisor.start(region_processes(options))
        stop.check()
        started_at = datetime.now(UTC)

        def state() -> RegionState:
            return _state(options, supervisor, etcd_server, metrics_host, started_at)

        write_region_state(state_path, state())
        token = options.admin_token_file.read_text().strip()

        def alive() -> None:
            stop.check()
            _check_alive(supervisor)

        with console.status("starting the region") as status:
            wait_until_ready(
                options,
                token,
                timeout_s=ready_timeout_s,
                progress=lambda text: status.update(text),
                alive=alive,
            )
        _print_ready(options, supervisor)
        while True:
            stop.check()
            happened = supervisor.tend()
            for line in happened:
                console.print(f"[yellow]{datetime.now():%H:%M:%S}[/] {line}", soft_wrap=True)
            if happened:
                write_region_state(state_path, state())
            time.sleep(0.25)
    except _Stop:
        console.print("stopping the region…")
    except RegionError as error:
        fail(str(error))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        supervisor.stop()
        if etcd_server:
            etcd_server.stop()
        state_path.unlink(missing_ok=True)
    console.print(
        "Stopped every service. Task processes keep running; the next `tether up` re-adopts "
        "them, `tether down --tasks` stops them."
    )


async def _bootstrap(options: RegionOptions) -> BootstrapResult:
    async with open_store(settings=options.store_settings("admin")) as store:
        return await bootstrap_region(
            store,
            name=options.region_name,
            shards=list(options.shards),
            fencing_s=options.fencing_s,
            non_preemptible_priority=options.non_preemptible_priority,
            admin_token_file=options.admin_token_file,
            default_entitlement=default_entitlement(options),
        )


class _EtcdPorts(TetherModel):
    """DIR/etcd.json: the ports of the etcd server `tether up --etcd` started last."""

    client_port: int = Field(gt=0, le=65535)
    peer_port: int = Field(gt=0, le=65535)


def _start_etcd(state_dir: Path, client_tls: ClientTls | None) -> EtcdServer:
    # The same ports each time, so that a resumed region's etcd keeps its advertised URLs.
    ports_file = state_dir / "etcd.json"
    try:
        saved: _EtcdPorts | None = from_json(_EtcdPorts, ports_file.read_bytes())
    except (OSError, ValidationError):
        saved = None  # the first start, or a file we cannot use: etcd gets free ports
    server = EtcdServer(
        data_dir=state_dir / "etcd",
        client_port=saved.client_port if saved else None,
        peer_port=saved.peer_port if saved else None,
        client_tls=client_tls,
    )
    server.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        server.start()
    except RuntimeError as error:
        _usage_error(f"could not start etcd: {error}")
    ports = _EtcdPorts(client_port=server.client_port, peer_port=server.peer_port)
    ports_file.write_bytes(to_json(ports))
    return server


def _state(
    options: RegionOptions,
    supervisor: Supervisor,
    etcd_server: EtcdServer | None,
    metrics_host: str,
    started_at: datetime,
) -> RegionState:
    """What the region file records: where the region serves, and its services' processes as
    they are now (pids of their last start, restarts, which ones do not run)."""
    processes = supervisor.processes
    return RegionState(
        pid=os.getpid(),
        url=options.url,
        urls=options.urls,
        docs_url=options.url + "/docs",
        registry_address=options.registry_address,
        admin_token_file=options.admin_token_file,
        ca_file=options.ca_file,
        store=options.store_url,
        etcd_pid=etcd_server.process.pid if etcd_server and etcd_server.process else 0,
        logs=options.log_dir,
        started_at=started_at,
        # Frontends serve GET /metrics themselves (with the token), on their REST port.
        metrics={
            r.spec.name: f"{options.scheme}://{metrics_host}:{r.spec.metrics_port}/metrics"
            for r in processes
            if r.spec.metrics_port
        },
        commands={r.spec.name: r.spec.argv() for r in processes},
        processes={r.spec.name: r.process.pid for r in processes},
        restarts={r.spec.name: r.restarts for r in processes},
        dead=sorted(r.spec.name for r in processes if r.process.poll() is not None),
    )


def _check_alive(supervisor: Supervisor) -> None:
    for ended in supervisor.exited():
        raise RegionError(
            f"{ended.spec.name} exited with code {ended.process.returncode} while starting; "
            f"its log ({ended.log_path}) ends with:\n{last_lines(ended.log_path)}"
        )


def _print_ready(options: RegionOptions, supervisor: Supervisor) -> None:
    console = err()
    console.print(
        f"[green]Region ready[/]: {len(supervisor.processes)} processes, logs in {options.log_dir}"
    )
    console.print(f"  REST API     {'  '.join(options.urls)}")
    console.print(f"  API docs     {options.url}/docs")
    console.print(f"  admin token  {options.admin_token_file}")
    if options.ca_file:
        console.print(f"  region CA    {options.ca_file} (mutual TLS between services)")
    console.print(f"  TaskControl  {options.registry_address} (TaskControllerRegistry, gRPC)")
    # Other directories than the one every command looks in by default must be named.
    elsewhere = options.state_dir != DEFAULT_STATE_DIR.resolve()
    where = f" --region-dir {options.state_dir}" if elsewhere else ""
    console.print(f"  try          tether job submit examples/hello.yaml --wait{where}")
    console.print("Press Ctrl-C to stop.")


def down(
    state_dir: Annotated[
        Path,
        typer.Option(
            "--dir",
            "--region-dir",
            envvar="TETHER_REGION_DIR",
            help="The region's directory, as given to tether up.",
        ),
    ] = DEFAULT_STATE_DIR,
    tasks: Annotated[
        bool, typer.Option("--tasks", help="Also stop every task process of the region.")
    ] = False,
) -> None:
    """Stop a region started with `tether up` (from another terminal)."""
    console = err()
    try:
        state = read_region_state(state_dir.resolve() / REGION_FILE_NAME)
    except RegionStateError as error:
        console.print(
            f"[yellow]warning:[/] {escape(str(error))}; it names no region to stop", soft_wrap=True
        )
        state = None
    pid = state.pid if state else None
    if pid is not None and process_alive(pid):
        os.kill(pid, signal.SIGTERM)
        with console.status(f"stopping the region (pid {pid})"):
            while process_alive(pid):
                time.sleep(0.2)
        console.print("Stopped the region's services.")
    else:
        console.print(f"No region is running from {state_dir}.", soft_wrap=True)
    if tasks:
        agents_dir = state_dir.resolve() / "agents"
        with console.status("stopping task processes"):
            stopped = sum(stop_tasks(work_dir) for work_dir in sorted(agents_dir.glob("*")))
        console.print(f"Stopped {stopped} task processes.")


def _usage_error(message: str) -> NoReturn:
    """A mistake in how `tether up` was called: status 2, as click's own usage errors."""
    fail(message, status=2)
