"""The process `tether up` forks its services from: it imports every service's code once, then
forks a service per request, so that none of them pays the second of CPU an import costs.

A region's start was CPU-bound: fifteen processes importing the same modules on a few cores.
The fork server is single-threaded (a fork copies only the thread that forks, so a lock another
thread held would stay locked in the child for good); should an import ever start a thread,
each child executes its command afresh instead, as `tether up` did before.

It speaks JSON lines: requests on stdin (`ForkRequest`), answered in order on stdout with each
child's pid once it is forked, then its exit code once it ended (`ForkEvent`, a negative signal
number as `subprocess` reports it). It ends when stdin closes; its children die with it (SIGTERM).

Run as `python -m tether.region.forkserver --dir STATE_DIR` (the directory only names the
process for `ps`, and for tools that find a region's processes by their command line).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import select
import signal
import sys
import traceback
from typing import NoReturn

from pydantic import BaseModel
from setproctitle import setproctitle

_PR_SET_PDEATHSIG = 1


class ForkRequest(BaseModel):
    """Start a service: `args` after `python -m tether.cli.services`, appending its output to
    `log`, with exactly the environment `env`; `title` is what `ps` shows for it."""

    args: list[str]
    env: dict[str, str]
    log: str
    title: str


class ForkEvent(BaseModel):
    """A service was forked (`code` None) or ended (with `code`)."""

    pid: int
    code: int | None = None


def die_with_parent() -> None:
    """Has the kernel SIGTERM this process when the one that started it dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _preload() -> None:
    # One BLAS thread: a thread pool started at import would make the process unsafe to fork.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from tether.cli.services import SERVICE_COMMANDS, command

    # Each service imports its store's backend on use: both, so that none has to.
    for module in ("tether.store.etcd", "tether.store.sql"):
        importlib.import_module(module)
    for name in SERVICE_COMMANDS:
        command(name)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _emit(event: ForkEvent) -> None:
    os.write(1, event.model_dump_json(exclude_defaults=True).encode() + b"\n")


def _exit_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _run_service(
    request: ForkRequest, parent: int, fork_safe: bool, inherited: tuple[int, ...]
) -> NoReturn:
    """In the child: becomes the service `request` names and exits with its code."""
    code = 1
    try:
        os.setsid()  # Ctrl-C at `tether up` reaches only the supervisor, as before.
        die_with_parent()
        if os.getppid() != parent:
            os._exit(1)  # the fork server died before the line above
        signal.set_wakeup_fd(-1)
        for fd in inherited:
            os.close(fd)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        log = os.open(request.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        if not fork_safe:
            argv = [sys.executable, "-m", "tether.cli.services", *request.args]
            os.execve(sys.executable, argv, request.env)
        # Before the environment changes: the title takes the place of the old one.
        setproctitle(request.title)
        os.environ.clear()
        os.environ.update(request.env)
        sys.argv = ["tether.cli.services", *request.args]
        from tether.cli.services import main

        main(request.args)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """Forks a service for each request on stdin until stdin closes."""
    die_with_parent()
    _preload()
    fork_safe = _threads() == 1
    if not fork_safe:
        print("an import started a thread: each service executes its command", file=sys.stderr)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    children: set[int] = set()
    server = os.getpid()
    pending = b""
    while True:
        readable, _, _ = select.select([0, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
            _reap(children)
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            request = ForkRequest.model_validate_json(line)
            pid = os.fork()
            if pid == 0:
                _run_service(request, server, fork_safe, (wake_read, wake_write))
            children.add(pid)
            _emit(ForkEvent(pid=pid))


def _reap(children: set[int]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        children.discard(pid)
        _emit(ForkEvent(pid=pid, code=_exit_code(status)))


if __name__ == "__main__":
    serve()
