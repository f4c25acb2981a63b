"""Starts, watches and stops the processes of a local region."""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.agent.procfs import start_ticks
from tether.agent.workdir import tail
from tether.region.launcher import ForkedProcess, Launcher, LaunchError
from tether.region.plan import ProcessSpec, RegionOptions
from tether.region.restarts import RestartPolicy, after_exit
from tether.sdk import TetherClient, TetherError

_log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 15.0

# Stop order, in phases whose roles stop together: nothing may judge machines or move tasks while
# their agents shut down (health and the rebalancer in the first phase), and agents go last so
# that tasks are watched for as long as possible. Within a phase the roles do not depend on each
# other.
STOP_PHASES = (
    ("frontend", "registry", "health", "rebalancer"),
    ("scheduler", "allocator", "broker"),
    ("agent",),
)


class RegionError(Exception):
    """The region cannot start or stop; the message says why and what to do."""


@dataclass
class RunningProcess:
    spec: ProcessSpec
    process: ForkedProcess
    log_path: Path
    started_at: float
    """Monotonic time of the (last) start."""
    reported_exit: bool = False
    restarts: int = 0
    fast_failures: int = 0
    restart_at: float | None = None
    """When it is due to start again, while it is dead and will be restarted."""


class Supervisor:
    """Owns the region's service processes: one per `ProcessSpec`, each logging to its file,
    each started again when it fails (`tend`) as `policy` says; None: never."""

    def __init__(
        self, options: RegionOptions, env: dict[str, str], policy: RestartPolicy | None = None
    ) -> None:
        self.options = options
        self._policy = policy
        self._launcher = Launcher(env, options.log_dir / "forkserver.log", options.state_dir)
        self.processes: list[RunningProcess] = []

    def prepare(self) -> None:
        """Has the services' code imported meanwhile, before `start`."""
        self._launcher.start_server()

    def start(self, specs: list[ProcessSpec]) -> None:
        self.options.log_dir.mkdir(parents=True, exist_ok=True)
        for spec in specs:
            log_path = self.options.log_dir / f"{spec.name}.log"
            self.processes.append(
                RunningProcess(spec, self._spawn(spec, log_path), log_path, time.monotonic())
            )

    def _spawn(self, spec: ProcessSpec, log_path: Path) -> ForkedProcess:
        try:
            return self._launcher.spawn(
                spec.name, spec.service_args(), " ".join(spec.argv()), log_path, spec.env
            )
        except LaunchError as error:
            raise RegionError(str(error)) from error

    def tend(self) -> list[str]:
        """Notices the services that died and starts those that are due again; returns what
        happened, a line each, for the operator."""
        now = time.monotonic()
        happened = []
        for ended in self.exited():
            code = ended.process.wait()  # at once: it ended
            if self._policy is None:
                happened.append(f"{ended.spec.name} exited with code {code} (not restarted)")
                continue
            verdict = after_exit(self._policy, code, now - ended.started_at, ended.fast_failures)
            ended.fast_failures = verdict.fast_failures
            if verdict.restart_in_s is not None:
                ended.restart_at = now + verdict.restart_in_s
            happened.append(f"{ended.spec.name} exited with code {code}: {verdict.why}")
        for running in self.processes:
            if running.restart_at is not None and now >= running.restart_at:
                running.process = self._spawn(running.spec, running.log_path)
                running.started_at, running.restart_at = now, None
                running.reported_exit = False
                running.restarts += 1
                happened.append(
                    f"{running.spec.name} restarted (pid {running.process.pid}, "
                    f"restart {running.restarts})"
                )
        return happened

    def exited(self) -> list[RunningProcess]:
        """Processes that ended since the last call (each reported once)."""
        ended = []
        for running in self.processes:
            if not running.reported_exit and running.process.poll() is not None:
                running.reported_exit = True
                ended.append(running)
        return ended

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM by phase of `STOP_PHASES`, waiting for each phase; SIGKILL what lingers.
        Dead services due for a restart stay dead."""
        for running in self.processes:
            running.restart_at = None
        for roles in STOP_PHASES:
            group = [r for r in self.processes if r.spec.role in roles and r.process.poll() is None]
            for running in group:
                running.process.terminate()
            deadline = time.monotonic() + timeout_s
            for running in group:
                try:
                    running.process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    _log.warning("%s did not stop in %ss; killing it", running.spec.name, timeout_s)
                    running.process.kill()
                    running.process.wait()
        self._launcher.stop(timeout_s)


def wait_until_ready(
    options: RegionOptions,
    token: str,
    *,
    timeout_s: float,
    progress: Callable[[str], None],
    alive: Callable[[], None],
) -> None:
    """Returns once every frontend answers, every agent's machine is up and every shard has a
    leader. `alive` raises when a service died meanwhile."""
    deadline = time.monotonic() + timeout_s
    waiting_for = "the frontend"
    clients = [
        TetherClient(url, token, timeout_s=2.0, ca_file=options.ca_file) for url in options.urls
    ]
    try:
        while time.monotonic() < deadline:
            alive()
            try:
                waiting_for = _not_ready_yet(clients, options.agents, len(options.shards))
            except TetherError:
                waiting_for = "the frontends"
            if not waiting_for:
                return
            progress(f"waiting for {waiting_for}")
            time.sleep(0.25)
    finally:
        for client in clients:
            client.close()
    raise RegionError(
        f"the region was not ready after {timeout_s:.0f} s (still waiting for {waiting_for}); "
        f"see the logs in {options.log_dir}"
    )


def _not_ready_yet(clients: list[TetherClient], agents: int, shards: int) -> str:
    ready = sum(1 for client in clients if client.ready())
    if ready < len(clients):
        return f"frontends: {ready} of {len(clients)} ready"
    client = clients[0]
    up = sum(1 for m in client.list_machines() if m.state == "up" and m.heartbeat)
    if up < agents:
        return f"machines: {up} of {agents} up"
    region = client.region()
    leaders = sum(1 for shard in region.shards if shard.leader)
    if leaders < shards:
        return f"scheduler leaders: {leaders} of {shards} shards"
    if not region.allocators:
        return "an allocator"
    return ""


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def process_alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie (exited, not yet reaped by its parent) does not."""
    return start_ticks(pid) is not None


def last_lines(path: Path, lines: int = 15) -> str:
    """The end of a service's log, for error messages."""
    return "\n".join(tail(path, 8192).decode(errors="replace").splitlines()[-lines:])
