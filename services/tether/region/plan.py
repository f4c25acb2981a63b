"""What a local region consists of: the processes to start and the machines the agents play."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from tether.config import StoreSettings
from tether.model import (
    DEFAULT_FENCING_S,
    DEFAULT_NON_PREEMPTIBLE_PRIORITY,
    Entitlement,
    Quota,
    Resources,
)
from tether.region.bootstrap import ADMIN_PRINCIPAL
from tether.region.certs import CertFiles, ca_files
from tether.store.etcd_server import ClientTls, free_port

DATACENTERS = ("dc1", "dc2")
MSBS_PER_DC = 2
RACKS_PER_MSB = 2
SHARDS = ("shard-0", "shard-1")
FRONTEND_PORT_STEP = 2
"""Frontend k listens on `--port` + 2k: 8080, 8082, ..., never on the registry's 8081."""
REPLICAS_PER_SHARD = 2
ALLOCATORS = 2
HARDWARE_TYPE = "local"
DEFAULT_ENTITLEMENT = "default"


@dataclass(frozen=True)
class RegionOptions:
    """Everything `tether up` was asked for."""

    state_dir: Path
    store_url: str
    agents: int = 4
    agent_capacity: Resources = field(
        default_factory=lambda: Resources(cpu=4000, memory_mib=4096, disk_gib=20)
    )
    host: str = "127.0.0.1"
    port: int = 8080
    registry_port: int = 8081
    frontends: int = 1
    shards: tuple[str, ...] = SHARDS
    fencing_s: float = DEFAULT_FENCING_S
    non_preemptible_priority: int = DEFAULT_NON_PREEMPTIBLE_PRIORITY
    region_name: str = "local"
    log_level: str = "INFO"
    tls: bool = False
    """Every endpoint over TLS, and mutual TLS between services (`tether up --tls`)."""
    store_tls: bool = False
    """The store is an etcd the region's CA certifies (`tether up --tls --etcd`): its clients
    show their own certificates."""

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def admin_token_file(self) -> Path:
        return self.state_dir / "admin.token"

    @property
    def frontend_ports(self) -> list[int]:
        return [self.port + FRONTEND_PORT_STEP * k for k in range(self.frontends)]

    @property
    def urls(self) -> list[str]:
        """Every frontend's base URL; they are stateless and serve the same API."""
        return [f"{self.scheme}://{self.host}:{port}" for port in self.frontend_ports]

    @property
    def url(self) -> str:
        """The first frontend's URL, the one the CLI uses by default."""
        return self.urls[0]

    @property
    def registry_address(self) -> str:
        """`host:port` of the TaskController registry (gRPC)."""
        return f"{self.host}:{self.registry_port}"

    @property
    def tls_dir(self) -> Path:
        """The region's CA and its services' certificates, when it serves TLS."""
        return self.state_dir / "tls"

    @property
    def ca_file(self) -> Path | None:
        """The region CA's certificate, when it serves TLS."""
        return ca_files(self.tls_dir).cert_file if self.tls else None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def etcd_tls(self) -> ClientTls | None:
        """How the etcd `tether up --etcd` starts serves its clients."""
        if not self.store_tls:
            return None
        own = CertFiles.named(self.tls_dir, "etcd")
        return ClientTls(ca_files(self.tls_dir).cert_file, own.cert_file, own.key_file)

    def store_settings(self, role: str) -> StoreSettings:
        """How a `role` process (a service's, or `admin` for `tether up` itself) opens the
        store."""
        if not self.store_tls:
            return StoreSettings(TETHER_STORE=self.store_url)
        own = CertFiles.named(self.tls_dir, role)
        return StoreSettings(
            TETHER_STORE=self.store_url,
            ca_file=ca_files(self.tls_dir).cert_file,
            cert_file=own.cert_file,
            key_file=own.key_file,
        )

    def process_env(self, role: str) -> dict[str, str]:
        """The environment of a `role` service besides the region's: in a TLS region its own
        certificate, the region's CA and mutual TLS between services (each role has its
        certificate, region/certs.py), for its store's connections too when the region's CA
        certifies the store."""
        if not self.tls:
            return {}
        own = CertFiles.named(self.tls_dir, role)
        return {
            "TETHER_TLS_CA_FILE": str(ca_files(self.tls_dir).cert_file),
            "TETHER_TLS_CERT_FILE": str(own.cert_file),
            "TETHER_TLS_KEY_FILE": str(own.key_file),
            "TETHER_TLS_MUTUAL": "true",
            **self._store_tls_env(role),
        }

    def _store_tls_env(self, role: str) -> dict[str, str]:
        if not self.store_tls:
            return {}
        settings = self.store_settings(role)
        return {
            "TETHER_STORE_CA_FILE": str(settings.ca_file),
            "TETHER_STORE_CERT_FILE": str(settings.cert_file),
            "TETHER_STORE_KEY_FILE": str(settings.key_file),
        }


@dataclass(frozen=True)
class AgentPlacement:
    """Where one local agent's machine sits in the simulated topology."""

    machine_id: str
    dc: str
    msb: str
    rack: str


@dataclass(frozen=True)
class ProcessSpec:
    """One service process of the region."""

    name: str
    """Unique within the region; also the log file's name."""
    role: str
    args: list[str]
    metrics_port: int = 0
    """Where it serves its Prometheus metrics; 0: nowhere (a frontend serves GET /metrics)."""
    env: dict[str, str] = field(default_factory=dict)
    """Its own environment, besides the region's: its certificate, in a TLS region."""

    def service_args(self) -> list[str]:
        """Its arguments to `python -m tether.cli.services`."""
        metrics = ["--metrics-port", str(self.metrics_port)] if self.metrics_port else []
        return [*self.args, *metrics]

    def argv(self) -> list[str]:
        """Its command line (only the service's own command is imported: half the CPU)."""
        return [sys.executable, "-m", "tether.cli.services", *self.service_args()]


def shard_ids(count: int) -> tuple[str, ...]:
    """The ids of a new region's `count` scheduler shards: shard-0, shard-1, ..."""
    return tuple(f"shard-{i}" for i in range(count))


def frontend_name(k: int) -> str:
    """`frontend` for the first (its log stays frontend.log), `frontend-<k>` for the others."""
    return "frontend" if k == 0 else f"frontend-{k}"


def agent_placements(count: int) -> list[AgentPlacement]:
    """Spreads `count` machines round-robin over DCs, then MSBs, then racks.

    Consecutive machines land in different DCs and MSBs, so even four agents cover every MSB
    and a small job's tasks can be spread over fault domains.
    """
    placements = []
    for i in range(count):
        dc = DATACENTERS[i % len(DATACENTERS)]
        msb = (i // len(DATACENTERS)) % MSBS_PER_DC + 1
        rack = (i // (len(DATACENTERS) * MSBS_PER_DC)) % RACKS_PER_MSB + 1
        placements.append(AgentPlacement(f"m{i + 1:02d}", dc, f"msb{msb}", f"r{rack}"))
    return placements


def agent_args(
    placement: AgentPlacement, *, region_name: str, capacity: Resources, work_dir: Path
) -> list[str]:
    """`tether agent` arguments for the machine at `placement`."""
    return [
        "agent",
        "--machine-id",
        placement.machine_id,
        "--region",
        region_name,
        "--dc",
        placement.dc,
        "--msb",
        placement.msb,
        "--rack",
        placement.rack,
        "--hardware-type",
        HARDWARE_TYPE,
        "--cpu",
        str(capacity.cpu),
        "--memory-mib",
        str(capacity.memory_mib),
        "--disk-gib",
        str(capacity.disk_gib),
        "--work-dir",
        str(work_dir),
    ]


def default_entitlement(options: RegionOptions) -> Entitlement:
    """The entitlement the README's tour uses: the admin's, as big as the local agents."""
    return Entitlement(
        name=DEFAULT_ENTITLEMENT,
        quota=Quota(resources=options.agent_capacity * options.agents),
        members=[ADMIN_PRINCIPAL],
    )


def region_processes(options: RegionOptions) -> list[ProcessSpec]:
    """Every service process, in start order: allocators and schedulers before the agents
    need them, the frontends last (they answer /readyz once the region is usable)."""
    common = ["--log-level", options.log_level]
    specs = [
        ProcessSpec(f"allocator-{i}", "allocator", ["allocator", "--id", f"allocator-{i}", *common])
        for i in range(ALLOCATORS)
    ]
    specs += [
        ProcessSpec(f"broker-{dc}", "broker", ["broker", "--dc", dc, *common]) for dc in DATACENTERS
    ]
    specs.append(ProcessSpec("health", "health", ["health", *common]))
    # On request only (`tether rebalance run`): moves are an operator's call until asked for
    # continuously (TETHER_REBALANCER_CONTINUOUS).
    specs.append(ProcessSpec("rebalancer", "rebalancer", ["rebalancer", *common]))
    specs += [
        ProcessSpec(
            f"scheduler-{shard}-{replica}", "scheduler", ["scheduler", "--shard", shard, *common]
        )
        for shard in options.shards
        for replica in "ab"[:REPLICAS_PER_SHARD]
    ]
    for placement in agent_placements(options.agents):
        specs.append(
            ProcessSpec(
                f"agent-{placement.machine_id}",
                "agent",
                [
                    *agent_args(
                        placement,
                        region_name=options.region_name,
                        capacity=options.agent_capacity,
                        work_dir=options.state_dir / "agents" / placement.machine_id,
                    ),
                    *common,
                ],
            )
        )
    specs.append(
        ProcessSpec(
            "registry",
            "registry",
            ["registry", "--host", options.host, "--port", str(options.registry_port), *common],
        )
    )
    specs += [
        ProcessSpec(
            frontend_name(k),
            "frontend",
            ["frontend", "--host", options.host, "--port", str(port), *common],
        )
        for k, port in enumerate(options.frontend_ports)
    ]
    # Each process its own metrics port: a process's metrics are its own (frontends serve theirs
    # at GET /metrics). None is bound until the processes start, so each is kept from the rest.
    taken = {options.registry_port, *options.frontend_ports}
    planned: list[ProcessSpec] = []
    for spec in specs:
        if spec.role != "frontend":
            spec = replace(spec, metrics_port=free_port(avoid=taken))
            taken.add(spec.metrics_port)
        planned.append(replace(spec, env=options.process_env(spec.role)))
    return planned
