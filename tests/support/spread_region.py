"""A region spread over hosts (network namespaces on a bridge, `netns.BridgedHosts`), as an
operator runs one: an etcd member on each host, the control plane's services on the first two,
agents on every one, each service a process started by its `tether` command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.harness import (
    FAST_FENCING_S,
    FAST_TIMINGS,
    get_json,
    kill_processes_under,
    wait_for,
)
from tests.support.netns import BridgedHosts, Host
from tether.model import Resources
from tether.region.plan import AgentPlacement, agent_args, shard_ids
from tether.store.etcd_server import EtcdCluster

FRONTEND_PORT = 8080
AGENTS_PER_HOST = 2
AGENT_CAPACITY = Resources(cpu=2000, memory_mib=2048, disk_gib=20)
SHARDS = 2
CONTROL_PLANE_HOSTS = 2
"""The control plane runs on the first hosts; the others hold an etcd member and agents."""


@dataclass
class SpreadRegion:
    """The region on `network`'s hosts; host i is datacenter dc<i>, its machines h<i>m<k>."""

    network: BridgedHosts
    state_dir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    etcd: EtcdCluster | None = None

    @property
    def hosts(self) -> list[Host]:
        return self.network.hosts

    @property
    def token(self) -> str:
        return (self.state_dir / "admin.token").read_text().strip()

    def url(self, host: int = 0) -> str:
        """The frontend on host number `host` (0 or 1)."""
        return f"http://{self.hosts[host].ip}:{FRONTEND_PORT}"

    def client(self, host: int = 0) -> httpx.Client:
        return httpx.Client(
            base_url=self.url(host),
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=10,
        )

    def machines_of(self, host: Host) -> list[str]:
        number = self.hosts.index(host) + 1
        return [f"h{number}m{k}" for k in range(1, AGENTS_PER_HOST + 1)]

    def store_url(self, near: Host) -> str:
        """Every etcd member, the one on `near` first: a client starts with its own host's."""
        assert self.etcd is not None
        members = sorted(self.etcd.members, key=lambda member: member.host != near.ip)
        return "etcd://" + ",".join(f"{m.host}:{m.client_port}" for m in members)

    def start(self) -> None:
        """The etcd cluster, the region's records, then every service; returns once the region
        is ready (both frontends, every machine up, every shard led)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.etcd = EtcdCluster(
            len(self.hosts),
            name="spread",
            hosts=[host.ip for host in self.hosts],
            command_prefixes=[host.prefix for host in self.hosts],
        )
        self.etcd.start()
        subprocess.run(
            [
                *(sys.executable, "-m", "tether.cli.main", "region", "init"),
                *("--store", self.etcd.url, "--name", "spread", "--shards", str(SHARDS)),
                *("--fencing-s", str(FAST_FENCING_S)),
                *("--admin-token-file", str(self.state_dir / "admin.token")),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        control_plane = self.hosts[:CONTROL_PLANE_HOSTS]
        for number, host in enumerate(control_plane):
            self._start_control_plane(number, host)
        for number, host in enumerate(self.hosts, start=1):
            for machine in self.machines_of(host):
                placement = AgentPlacement(machine, f"dc{number}", "msb1", f"r{machine[-1]}")
                args = agent_args(
                    placement,
                    region_name="spread",
                    capacity=AGENT_CAPACITY,
                    work_dir=self.state_dir / "agents" / machine,
                )
                self._start(f"agent-{machine}", host, args, {"TETHER_AGENT_HTTP_HOST": host.ip})
        with self.client() as client:
            machines = len(self.hosts) * AGENTS_PER_HOST
            wait_for(
                lambda: self._ready(client, machines),
                timeout_s=120,
                what="the spread region to be ready",
            )

    def _start_control_plane(self, number: int, host: Host) -> None:
        dc = f"dc{number + 1}"
        self._start(
            f"frontend-{dc}",
            host,
            ["frontend", "--host", host.ip, "--port", str(FRONTEND_PORT)],
        )
        self._start(
            f"allocator-{dc}", host, ["allocator", "--id", f"allocator-{dc}", "--host", host.ip]
        )
        self._start(f"health-{dc}", host, ["health"])
        for shard in shard_ids(SHARDS):
            self._start(
                f"scheduler-{shard}-{dc}",
                host,
                ["scheduler", "--shard", shard],
                {"TETHER_SCHEDULER_LIVENESS_HOST": host.ip},
            )
        # A broker for each datacenter: the first control-plane host's own and those of the
        # hosts without a control plane, the second's own.
        datacenters = (
            [dc, *(f"dc{k + 1}" for k in range(CONTROL_PLANE_HOSTS, len(self.hosts)))]
            if number == 0
            else [dc]
        )
        for served in datacenters:
            self._start(f"broker-{served}", host, ["broker", "--dc", served])

    def _start(
        self, name: str, host: Host, args: list[str], env: dict[str, str] | None = None
    ) -> None:
        log = self.state_dir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as output:
            self.processes[name] = subprocess.Popen(
                [*host.prefix, sys.executable, "-m", "tether.cli.services", *args],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={
                    **os.environ,
                    **FAST_TIMINGS,
                    "TETHER_STORE": self.store_url(host),
                    **(env or {}),
                },
            )

    def _ready(self, client: httpx.Client, machines: int) -> bool:
        self.check_alive()
        try:
            if client.get("/readyz").status_code != 200:
                return False
            up = [m for m in get_json(client, "/v1/machines")["machines"] if m["state"] == "up"]
            leaders = get_json(client, "/admin/shards")["shards"]
        except httpx.HTTPError:
            return False
        return len(up) == machines and all(shard.get("leader") for shard in leaders)

    def check_alive(self) -> None:
        """Fails naming the services that exited, with the end of their logs."""
        dead = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        if dead:
            tails = "\n".join(
                f"--- {name} (exit {code}):\n{self.log_tail(name)}" for name, code in dead.items()
            )
            raise AssertionError(f"services exited: {sorted(dead)}\n{tails}")

    def log_tail(self, name: str, lines: int = 20) -> str:
        text = (self.state_dir / "logs" / f"{name}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def cleanup(self) -> None:
        """Stops every service, the tasks they left, and etcd."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        kill_processes_under(self.state_dir)
        if self.etcd is not None:
            self.etcd.cleanup()
