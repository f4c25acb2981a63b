"""The shims' fork server: a process an agent starts once, which imports the shim and forks one
for every attempt, so that starting a task costs a fork rather than a Python interpreter.

A shim started as a command (`python -S -m tether.agent.shim spec.json`) cost 60-80 ms of CPU
on the 2-core machine, most of it the interpreter's start and imports; under the mixed API load
the shims were the largest consumer of CPU. A fork of the already started server costs about a
millisecond.

The server speaks JSON lines: a request on stdin names the spec, the directory to run in and the
file that takes the shim's own stderr; the answer on stdout is the forked shim's pid. Each shim
runs in a session of its own, as a started one did, and outlives the server and the agent: the
server only reaps those that end while it lives. It ends when its stdin closes (the agent
stopped or died) or, should the agent die first, when the kernel tells it to (SIGTERM).

Like the shim, it imports only the standard library and `tether.agent`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from types import FrameType
from typing import IO, NoReturn

from tether.agent import shim

_PR_SET_PDEATHSIG = 1


class ShimForkServer:
    """The agent's side: starts the server on first use, and again should it have died."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        """`command` runs the server (`python -S -m tether.agent.shimfork`) with `env`."""
        self._command = command
        self._env = env
        self._server: subprocess.Popen[bytes] | None = None

    def fork(self, spec: Path, cwd: Path, stderr: Path) -> int:
        """Forks a shim of `spec` in `cwd`, its own complaints appended to `stderr`; its pid.
        OSError when the server cannot be started or does not answer, twice."""
        request = json.dumps({"spec": str(spec), "cwd": str(cwd), "stderr": str(stderr)})
        failure: Exception | None = None
        for _ in range(2):
            server = self._running()
            assert server.stdin is not None
            assert server.stdout is not None
            try:
                server.stdin.write(request.encode() + b"\n")
                server.stdin.flush()
                return int(json.loads(server.stdout.readline())["pid"])
            except (OSError, ValueError, KeyError, TypeError) as error:
                failure = error
                self.close()
        raise OSError(f"the shim fork server failed: {failure!r}")

    def close(self) -> None:
        """Ends the server (the shims it forked run on)."""
        server, self._server = self._server, None
        if server is None:
            return
        assert server.stdin is not None
        assert server.stdout is not None
        with contextlib.suppress(OSError):
            server.stdin.close()
        server.stdout.close()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    def _running(self) -> subprocess.Popen[bytes]:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen(
                self._command,
                env=self._env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                # Its own crash goes where the agent's does.
                stderr=None,
            )
        return self._server


def _reap(signum: int, frame: FrameType | None) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _become_shim(request: dict[str, str]) -> NoReturn:
    """In the forked child: runs the shim of the request and exits with its code."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDWR)
        stderr = os.open(request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(stderr, 2)
        os.close(null)
        os.close(stderr)
        os.chdir(request["cwd"])
        code = shim.main([request["spec"]])
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Forks a shim for every request until `requests` ends."""
    signal.signal(signal.SIGCHLD, _reap)
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _become_shim(request)
        answers.write(json.dumps({"pid": pid}).encode() + b"\n")
        answers.flush()


def main() -> None:
    # Should the agent die without closing our stdin, the kernel ends this server.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
