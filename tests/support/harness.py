"""Driving a `tether up` process from Python, for end-to-end tests and benchmarks."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tether.agent.procfs import start_ticks
from tether.config import StoreSettings
from tether.model import REGION_FILE_NAME, RegionState, ShardLeader, from_json, read_region_state
from tether.region.plan import FRONTEND_PORT_STEP, RegionOptions
from tether.region.supervisor import port_is_free
from tether.store import keys, open_store
from tether.store.etcd_server import free_port
from tether.tls import client_context

T = TypeVar("T")

# Short leases and grace periods, so failures are noticed within seconds in tests.
FAST_TIMINGS = {
    "TETHER_AGENT_LEASE_TTL_S": "2",
    "TETHER_HEALTH_GRACE_S": "2",
    "TETHER_SCHEDULER_LEASE_TTL_S": "3",
    "TETHER_ALLOCATOR_LEASE_TTL_S": "3",
}
FAST_FENCING_S = 3.0
"""The tests' fencing period of at-most-once tasks (`tether up --fencing-s`): just above the
agents' lease TTL."""


_PORT_ATTEMPTS = 3

_NOTABLE = re.compile(r"\b(WARNING|ERROR|CRITICAL)\b|Traceback|Error: |exited|restart")
"""Log lines a failed test's report shows (`LocalRegion.log_digest`)."""


def wait_for(
    check: Callable[[], T | None], *, timeout_s: float, what: str, interval_s: float = 0.2
) -> T:
    """Polls `check` until it returns something truthy; fails naming `what` on timeout."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def free_frontend_ports(count: int, *, besides: int) -> int:
    """A base port whose `count` frontend ports (base + 2k) are free and not `besides`."""
    while True:
        base = free_port()
        ports = [base + FRONTEND_PORT_STEP * k for k in range(count)]
        if besides not in ports and all(port_is_free("127.0.0.1", p) for p in ports[1:]):
            return base


@dataclass
class LocalRegion:
    """`tether up` in `state_dir`, on `store_args` (`--etcd` or `--store URL`, or nothing)."""

    state_dir: Path
    store_args: list[str] = field(default_factory=list)
    agents: int = 4
    frontends: int = 1
    shards: int = 2
    up_args: list[str] = field(default_factory=list)
    """More `tether up` options, e.g. ["--agent-cpu", "1000"]."""
    supervised: bool = False
    """Whether `tether up` restarts services that die. The fault tests kill services and start
    them again themselves, as an operator would without it; the supervision test and the soak
    leave it to `tether up`."""
    port: int = 0
    """The first frontend's port; 0: free ports are chosen for every frontend."""
    registry_port: int = field(default_factory=free_port)
    fencing_s: float = FAST_FENCING_S
    """`tether up --fencing-s`: how long an agent cut off from the store keeps its at-most-once
    tasks."""
    timings: dict[str, str] = field(default_factory=lambda: dict(FAST_TIMINGS))
    """Leases and grace periods (environment variables): the tests' short ones by default, {}
    for the services' own defaults."""
    extra_env: dict[str, str] = field(default_factory=dict)
    """Environment for every service on top of `timings`, e.g. TETHER_AGENT_PROFILE_HOOK."""
    tls: bool = False
    """`tether up --tls`: every endpoint over TLS, mutual TLS between services."""
    process: subprocess.Popen[bytes] | None = None
    service_pids_at_stop: list[int] = field(default_factory=list)
    """The service processes that ran when `stop()` was last called."""
    restarted: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """Services started again by `restart()`, outside `tether up`, by name."""

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_frontend_ports(self.frontends, besides=self.registry_port)

    @property
    def url(self) -> str:
        """The first frontend's URL."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path | None:
        """The region CA's certificate, when it serves TLS."""
        return self.state_dir / "tls" / "ca.pem" if self.tls else None

    @property
    def urls(self) -> list[str]:
        """Every frontend's URL, as `tether up` recorded them in the region file."""
        return self.state().urls

    @property
    def registry_address(self) -> str:
        return f"127.0.0.1:{self.registry_port}"

    @property
    def token(self) -> str:
        return (self.state_dir / "admin.token").read_text().strip()

    @property
    def output_path(self) -> Path:
        return self.state_dir.parent / f"{self.state_dir.name}-up.log"

    def env(self) -> dict[str, str]:
        env = {**os.environ, **self.timings, **self.extra_env}
        env.pop("TETHER_STORE", None)
        return env

    def start(self, timeout_s: float = 120.0) -> None:
        """Runs `tether up` and returns once it says the region is ready.

        The ports are chosen free, but a service binds its own only once it runs: should
        something else take one meanwhile (the suite's other worker binds random ports too),
        `tether up` fails at once, and it is run again, on other ports."""
        for attempt in range(_PORT_ATTEMPTS):
            earlier_output = self.launch(timeout_s)
            try:
                wait_for(
                    functools.partial(self._ready, earlier_output),
                    timeout_s=timeout_s + 10,
                    what="tether up to report ready",
                )
                return
            except AssertionError:
                taken = "Address already in use" in self.output()[earlier_output:]
                if not taken or attempt == _PORT_ATTEMPTS - 1:
                    raise
            self.registry_port = free_port()
            self.port = free_frontend_ports(self.frontends, besides=self.registry_port)

    def launch(self, timeout_s: float = 120.0) -> int:
        """Runs `tether up` (which gives up after `timeout_s` unless the region is ready) and
        returns at once, with the length of its output until then."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "tether.cli.main",
            "up",
            "--dir",
            str(self.state_dir),
            "--port",
            str(self.port),
            "--registry-port",
            str(self.registry_port),
            "--agents",
            str(self.agents),
            "--frontends",
            str(self.frontends),
            "--shards",
            str(self.shards),
            "--fencing-s",
            str(self.fencing_s),
            "--restart" if self.supervised else "--no-restart",
            "--ready-timeout-s",
            str(timeout_s),
            *self.store_args,
            *(["--tls"] if self.tls else []),
            *self.up_args,
        ]
        earlier_output = len(self.output()) if self.output_path.exists() else 0
        with self.output_path.open("ab") as output:
            self.process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, env=self.env()
            )
        return earlier_output

    def _ready(self, earlier_output: int) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"tether up exited:\n{self.output()}")
        return "Region ready" in self.output()[earlier_output:]

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def log_digest(self, lines_per_log: int = 30) -> str:
        """The last warnings, errors and tracebacks of every service's log and of `tether up`'s
        output: what a failed test's report shows, so a failure seen only in CI can be read."""
        logs = [self.output_path]
        if self.region_file.exists():
            logs += sorted(self.state().logs.glob("*.log"))
        parts = []
        for log in logs:
            if not log.exists():
                continue
            text = log.read_text(errors="replace").splitlines()
            notable = [line for line in text if _NOTABLE.search(line)][-lines_per_log:]
            if notable:
                parts.append(f"== {log.name} ({len(text)} lines) ==\n" + "\n".join(notable))
        return "\n".join(parts) or "(no warnings or errors in the region's logs)"

    def stop(self) -> None:
        """SIGTERM to the services `restart()` started, then to `tether up`, as `tether down`
        does; task processes keep running. The restarted ones go first: `tether up` stops
        the store it started (`--etcd`) and the agents, which they would outlive."""
        running = self.process is not None and self.process.poll() is None
        if running and self.region_file.exists():
            self.service_pids_at_stop = list(self.service_pids().values())
        self._stop_restarted()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"tether up did not stop:\n{self.output()}") from None

    def _stop_restarted(self) -> None:
        for process in self.restarted.values():
            if process.poll() is None:
                process.terminate()
        for process in self.restarted.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.restarted.clear()

    @property
    def region_file(self) -> Path:
        return self.state_dir / REGION_FILE_NAME

    def state(self) -> RegionState:
        """What `tether up` recorded in its region file: URLs, store, commands, pids, restarts."""
        state = read_region_state(self.region_file)
        assert state is not None, f"tether up has written no {self.region_file}"
        return state

    def service_pids(self) -> dict[str, int]:
        """Service name -> pid: the state file's, or the process `restart()` started."""
        return self.state().processes | {
            name: process.pid for name, process in self.restarted.items()
        }

    def restart(self, name: str) -> int:
        """Starts service `name` again with the command `tether up` recorded, on the region's
        store and environment, logging to its log file, as an operator would after a crash
        (`tether up` does not restart services). Returns its pid; `stop()` stops it."""
        state = self.state()
        earlier = self.restarted.get(name)
        if earlier is not None:
            earlier.poll()  # reaps an earlier replacement that was killed in turn
        log_path = state.logs / f"{name}.log"
        with log_path.open("ab") as log:
            self.restarted[name] = subprocess.Popen(
                state.commands[name],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**self.env(), "TETHER_STORE": state.store},
                start_new_session=True,
            )
        return self.restarted[name].pid

    def store_url(self) -> str:
        """The region's store, from its state file."""
        return self.state().store

    def options(self) -> RegionOptions:
        """What `tether up` was asked for, as far as TLS and the store go."""
        return RegionOptions(
            self.state_dir,
            self.store_url(),
            tls=self.tls,
            store_tls=self.tls and "--etcd" in self.store_args,
        )

    def store_settings(self) -> StoreSettings:
        """How an operator's tool opens the region's store: with the admin's certificate when
        the region's CA certifies it (`--tls --etcd`)."""
        return self.options().store_settings("admin")

    def shard_leader(self, shard: str) -> ShardLeader | None:
        """The shard's leader record as the store holds it now."""

        async def read() -> ShardLeader | None:
            async with open_store(settings=self.store_settings()) as store:
                kv = await store.get(keys.shard_leader(shard))
                return None if kv is None else from_json(ShardLeader, kv.value, stored=True)

        return asyncio.run(read())

    def shard_of(self, entitlement: str) -> str:
        """The shard that schedules the entitlement's jobs, from the store's shard map."""

        async def read() -> str:
            async with open_store(settings=self.store_settings()) as store:
                kv = await store.get(keys.shard_assignment(entitlement))
                assert kv is not None, f"entitlement {entitlement} is on no shard"
                return kv.value.decode()

        return asyncio.run(read())

    def cli(self, *args: str, timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
        """Runs the real `tether` CLI with the region's URL and admin token."""
        return subprocess.run(
            [sys.executable, "-m", "tether.cli.main", *args],
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "TETHER_URL": self.url,
                "TETHER_TOKEN": self.token,
                **({"TETHER_CA_FILE": str(self.ca_file)} if self.ca_file else {}),
            },
            timeout=timeout_s,
            check=False,
        )

    def client(self, frontend: int = 0) -> httpx.Client:
        """An HTTP client of frontend number `frontend` (in `urls` order), as the admin."""
        return httpx.Client(
            base_url=self.urls[frontend] if frontend else self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=10,
            verify=client_context(self.ca_file),
        )

    def cleanup(self) -> None:
        """Stops the region and kills every process it left behind (task processes too)."""
        try:
            self.stop()
        finally:
            kill_processes_under(self.state_dir)


def kill_processes_under(directory: Path) -> int:
    """SIGKILLs every process whose working directory or command line is under `directory`.

    Catches task processes (their sandbox is under the region's directory) and their shims
    (whose command line names files there), whatever happened to the agents.
    """
    marker = str(directory.resolve())
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd.startswith(marker) or marker in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def running_for(pid: int) -> float:
    """Seconds since process `pid` started; 0 if it does not run."""
    ticks = start_ticks(pid)
    if ticks is None:
        return 0.0
    since_boot = float(Path("/proc/uptime").read_text().split()[0])
    return since_boot - ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time the process has used so far; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float | None:
    """The process's peak resident set size so far (VmHWM), in MiB; None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def start_simulated_machines(
    region: LocalRegion, machines: int, work_dir: Path, *args: str
) -> subprocess.Popen[bytes]:
    """`tether agent-sim` with `machines` machines (and `args`) on the region's store, logging
    to `work_dir`; returns once the frontend lists them all."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with (work_dir / "agent-sim.log").open("ab") as log:
        fleet = subprocess.Popen(
            [
                *(sys.executable, "-m", "tether.cli.main", "agent-sim"),
                *("--machines", str(machines), *args, "--store", region.store_url()),
                *("--work-dir", str(work_dir), "--lease-ttl-s", "2"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            # In a TLS region, with an agent's certificate, as `tether up` starts its agents.
            env={**region.env(), **region.options().process_env("agent")},
        )
    with region.client() as client:
        wait_for(
            lambda: len(get_json(client, "/v1/machines")["machines"]) == machines,
            timeout_s=120,
            what=f"{machines} simulated machines",
        )
    return fleet


def get_json(client: httpx.Client, path: str) -> Any:
    response = client.get(path)
    assert response.status_code == 200, f"GET {path}: {response.status_code} {response.text}"
    return response.json()


def submit(client: httpx.Client, spec: dict[str, Any]) -> str:
    """Submits `spec` and returns the new job's handle; fails unless the answer is 201."""
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    handle: str = response.json()["handle"]
    return handle


def machines_by_id(client: httpx.Client) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in get_json(client, "/v1/machines")["machines"]}


def tasks_of(client: httpx.Client, handle: str) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = get_json(client, f"/v1/jobs/{handle}/tasks")["tasks"]
    return tasks


def all_running(client: httpx.Client, handle: str, count: int) -> list[dict[str, Any]] | None:
    """The job's tasks when exactly `count` are running with a pid, else None."""
    tasks = tasks_of(client, handle)
    running = [t for t in tasks if t["state"] == "running" and t["pid"]]
    return tasks if len(tasks) == count and len(running) == count else None


def sleeper_job(name: str, count: int, *, entitlement: str = "default") -> dict[str, Any]:
    """A job whose tasks sleep (and say who they are first), restarted on any exit."""
    return {
        "name": name,
        "entitlement": entitlement,
        "count": count,
        "task": {
            "package": "sleeper",
            "version": "1",
            "command": "/bin/sh",
            "args": ["-c", 'echo "task $TETHER_TASK_ID up"; exec sleep 3600'],
            "resources": {"cpu": 100, "memory_mib": 64},
            "restart": {"mode": "always", "backoff_initial_s": 0.5, "backoff_max_s": 2},
        },
    }
