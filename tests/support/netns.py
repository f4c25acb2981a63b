"""Network partitions on one machine: a network namespace joined to the host by a veth pair, with
an agent of the region inside that reaches the store only through it; and several namespaces on a
bridge, each a host of a region spread over them."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from tests.support.harness import LocalRegion
from tether.model import Resources
from tether.region.plan import agent_args, agent_placements


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@dataclass
class Namespace:
    """A network namespace joined to the host by a veth pair with an address on each end."""

    name: str
    host_link: str
    inner_link: str
    host_ip: str
    inner_ip: str

    @classmethod
    def unique(cls) -> Namespace:
        # Interface names have at most 15 characters; the pid keeps concurrent runs apart.
        tag = os.getpid() % 100_000
        subnet = f"10.213.{os.getpid() % 250}"
        return cls(f"tether-{tag}", f"tth{tag}h", f"tth{tag}n", f"{subnet}.1", f"{subnet}.2")

    def create(self) -> None:
        _ip("netns", "add", self.name)
        _ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.inner_link)
        _ip("link", "set", self.inner_link, "netns", self.name)
        _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_link)
        _ip("link", "set", self.host_link, "up")
        self.run("ip", "addr", "add", f"{self.inner_ip}/30", "dev", self.inner_link)
        self.run("ip", "link", "set", "lo", "up")
        self.heal()

    def run(self, *argv: str) -> None:
        _ip("netns", "exec", self.name, *argv)

    def cut(self) -> None:
        """Takes the namespace's end of the link down: nothing gets in or out."""
        self.run("ip", "link", "set", self.inner_link, "down")

    def heal(self) -> None:
        self.run("ip", "link", "set", self.inner_link, "up")

    def delete(self) -> None:
        """Removes the namespace and both ends of the link, whatever exists of them."""
        for args in (("link", "del", self.host_link), ("netns", "del", self.name)):
            subprocess.run(["ip", *args], capture_output=True, timeout=10, check=False)


def start_agent_in(
    namespace: Namespace, region: LocalRegion, store_url: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Starts the agent of the region's next machine (the one after its `tether up` agents)
    inside `namespace`, on `store_url` (the store's address on the host's end of the link),
    logging where `tether up`'s agents log. Returns the process and the machine id."""
    placement = agent_placements(region.agents + 1)[region.agents]
    machine = placement.machine_id
    log = region.state_dir / "logs" / f"agent-{machine}.log"
    with log.open("ab") as output:
        agent = subprocess.Popen(
            [
                *("ip", "netns", "exec", namespace.name),
                *(sys.executable, "-m", "tether.cli.main"),
                *agent_args(
                    placement,
                    region_name="local",
                    capacity=Resources(cpu=4000, memory_mib=4096, disk_gib=20),
                    work_dir=region.state_dir / "agents" / machine,
                ),
            ],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**region.env(), "TETHER_STORE": store_url},
        )
    return agent, machine


@dataclass(frozen=True)
class Host:
    """A network namespace standing for one host, linked to a bridge by a veth pair."""

    namespace: str
    ip: str
    bridge_link: str
    """The pair's end on the bridge, outside the namespace."""
    inner_link: str

    @property
    def prefix(self) -> list[str]:
        """Runs a command on this host: `ip netns exec NAMESPACE`."""
        return ["ip", "netns", "exec", self.namespace]


@dataclass
class BridgedHosts:
    """Hosts (network namespaces) on one bridge, as machines on one network. The bridge has an
    address too, so the test itself reaches every host; `cut` takes a host's link down."""

    bridge: str
    bridge_ip: str
    hosts: list[Host]

    @classmethod
    def unique(cls, count: int) -> BridgedHosts:
        # Interface names have at most 15 characters; the pid keeps concurrent runs apart.
        tag = os.getpid() % 100_000
        subnet = f"10.214.{os.getpid() % 250}"
        hosts = [
            Host(f"tether-{tag}-h{i}", f"{subnet}.{i}", f"tth{tag}b{i}", f"tth{tag}i{i}")
            for i in range(1, count + 1)
        ]
        return cls(f"tthbr{tag}", f"{subnet}.254", hosts)

    def create(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.bridge_ip}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for host in self.hosts:
            _ip("netns", "add", host.namespace)
            _ip("link", "add", host.bridge_link, "type", "veth", "peer", "name", host.inner_link)
            _ip("link", "set", host.inner_link, "netns", host.namespace)
            _ip("link", "set", host.bridge_link, "master", self.bridge)
            _ip("link", "set", host.bridge_link, "up")
            inside = ("netns", "exec", host.namespace, "ip")
            _ip(*inside, "addr", "add", f"{host.ip}/24", "dev", host.inner_link)
            _ip(*inside, "link", "set", "lo", "up")
            _ip(*inside, "link", "set", host.inner_link, "up")

    def cut(self, host: Host) -> None:
        """Nothing gets to or from `host` any more."""
        _ip("link", "set", host.bridge_link, "down")

    def heal(self, host: Host) -> None:
        _ip("link", "set", host.bridge_link, "up")

    def delete(self) -> None:
        """Removes the hosts, their links and the bridge, whatever exists of them."""
        for host in self.hosts:
            for args in (("link", "del", host.bridge_link), ("netns", "del", host.namespace)):
                subprocess.run(["ip", *args], capture_output=True, timeout=10, check=False)
        subprocess.run(
            ["ip", "link", "del", self.bridge], capture_output=True, timeout=10, check=False
        )
