"""The supervisor's side of the fork server (region/forkserver.py): starts it, asks it for
services, and hands out for each one a `ForkedProcess` that answers as `subprocess.Popen` does."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tether.region.forkserver import ForkEvent, ForkRequest, die_with_parent

_START_TIMEOUT_S = 120.0
"""How long the fork server may take to import every service and fork one (seconds on an idle
machine; a region starting beside others on two cores can take many times that)."""


class LaunchError(Exception):
    """The fork server cannot start a service; the message says why and where its log is."""


class ForkedProcess:
    """A service the fork server started: its pid, and its exit code once the server saw it end."""

    def __init__(self, launcher: Launcher, pid: int) -> None:
        self._launcher = launcher
        self.name = ""
        """The service's name, once `spawn` hands it out."""
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._launcher.receive(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(self.name, timeout or 0)
            self._launcher.receive(left)
        return self.returncode

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)


class Launcher:
    """Starts services through one fork server, started on first use with environment `env`
    and logging to `log_path`; `stop` ends it (after the services: they die with it)."""

    def __init__(self, env: dict[str, str], log_path: Path, state_dir: Path) -> None:
        self._env = env
        self._log_path = log_path
        self._state_dir = state_dir
        self._server: subprocess.Popen[bytes] | None = None
        self._pending = b""
        self._running: dict[int, ForkedProcess] = {}
        self._forked: list[ForkedProcess] = []
        """Forked, not yet handed out by `spawn` (the server answers requests in order)."""

    def start_server(self) -> None:
        """Starts the fork server unless it runs, so that it imports while the caller works."""
        if self._server is not None and self._server.poll() is None:
            return
        self._lost()
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as log:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "tether.region.forkserver", "--dir", str(self._state_dir)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self._env,
                # Ctrl-C reaches the supervisor alone, which stops the services in order.
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        assert self._server.stdout is not None
        os.set_blocking(self._server.stdout.fileno(), False)

    def spawn(
        self, name: str, args: list[str], title: str, log_path: Path, env: Mapping[str, str]
    ) -> ForkedProcess:
        """Starts service `name` (`python -m tether.cli.services ARGS`) with `env` besides the
        launcher's environment, appending its output to `log_path`; returns once it runs."""
        self.start_server()
        assert self._server is not None
        assert self._server.stdin is not None
        request = ForkRequest(args=args, env={**self._env, **env}, log=str(log_path), title=title)
        try:
            self._server.stdin.write(request.model_dump_json().encode() + b"\n")
            self._server.stdin.flush()
        except BrokenPipeError:
            self._lost()
            raise LaunchError(self._failure(f"could not start {name}")) from None
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not self._forked:
            if self._server is None or time.monotonic() > deadline:
                raise LaunchError(self._failure(f"could not start {name}"))
            self.receive(deadline - time.monotonic())
        forked = self._forked.pop(0)
        forked.name = name
        return forked

    def receive(self, timeout_s: float) -> None:
        """Takes in what the fork server reported, waiting up to `timeout_s` for something."""
        if self._server is None or self._server.stdout is None:
            return
        fd = self._server.stdout.fileno()
        readable, _, _ = select.select([fd], [], [], max(timeout_s, 0))
        if not readable:
            return
        chunk = os.read(fd, 65536)
        if not chunk:
            self._lost()
            return
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            self._apply(ForkEvent.model_validate_json(line))

    def stop(self, timeout_s: float) -> None:
        """Ends the fork server (which takes its remaining services with it)."""
        if self._server is None:
            return
        assert self._server.stdin is not None
        self._server.stdin.close()
        try:
            self._server.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()
        self._lost()

    def _apply(self, event: ForkEvent) -> None:
        if event.code is None:
            # Its exit may come in the same read, before `spawn` takes it: tracked from here.
            forked = ForkedProcess(self, event.pid)
            self._running[event.pid] = forked
            self._forked.append(forked)
            return
        process = self._running.pop(event.pid, None)
        if process is not None:
            process.returncode = event.code

    def _lost(self) -> None:
        """The fork server is gone: its services got SIGTERM from the kernel with it."""
        for process in self._running.values():
            process.returncode = -signal.SIGTERM
        self._running.clear()
        self._forked.clear()
        self._server = None
        self._pending = b""

    def _failure(self, what: str) -> str:
        return f"{what}: the fork server that starts services failed; see {self._log_path}"
