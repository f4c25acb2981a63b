"""What every script under scripts/ shares: progress on stderr, a clean stop on a signal, where
its plots go, and the machine's available memory."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

_STARTED = time.monotonic()
_PROFILE_RATE_HZ = 49
"""Samples per second of a profile: off the beat of the services' 10 Hz and 50 Hz timers."""

RESULTS_DIR = Path(__file__).resolve().parents[2] / "bench-results"
"""Where plots go unless a script is told otherwise: git ignores it, so a run leaves the
source tree as it found it."""


def log(message: str) -> None:
    """Progress for people, on stderr (stdout carries only the result's JSON line)."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def available_mib() -> float:
    """The memory the machine can still give processes without swapping (MemAvailable), MiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable line")


async def memory_below(floor_mib: float, every_s: float = 2.0) -> float:
    """Returns the available MiB once it falls below `floor_mib`: a run at the edge of the
    machine stops and reports how far it got before the kernel's OOM killer picks a victim."""
    while True:
        available = available_mib()
        if available < floor_mib:
            return available
        await asyncio.sleep(every_s)


def default_plot(name: str) -> Path:
    """The path of the plot `name` when the user names none: in `RESULTS_DIR`."""
    return RESULTS_DIR / name


def add_plot_option(parser: argparse.ArgumentParser, name: str) -> None:
    """`--plot PATH`, by default `name` in `RESULTS_DIR`."""
    parser.add_argument(
        "--plot",
        type=Path,
        default=default_plot(name),
        help="where the plot goes (default: bench-results/, which git ignores)",
    )


def save_figure(figure: Any, path: Path) -> None:
    """Writes a matplotlib figure to `path` (as PNG by its suffix), making its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def stop_on_signals() -> None:
    """Makes SIGTERM and SIGINT raise SystemExit(128 + the signal's number) in the main thread,
    so that the `finally` blocks and context managers that remove what a script started (its
    region, etcd server, simulated machines, temporary directory) run however it is stopped:
    SIGTERM's default ends the process at once, and a shell that starts a script in the
    background makes it ignore SIGINT. The exit status is the shell's for a signal, without a
    traceback; signals that come while it stops are ignored, so the cleanup finishes."""
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)


def _stop(signum: int, _frame: FrameType | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    log(f"{signal.Signals(signum).name}: stopping; removing what this run started")
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def profiled(pids: Mapping[str, int], directory: Path | None) -> Iterator[None]:
    """Records a flame graph of each Python process in `pids` (name -> pid) while the block
    runs, as `directory`/<name>.svg, with py-spy; does nothing when `directory` is None.

    py-spy samples from outside (it reads the process's memory: root, or ptrace allowed), so a
    profile costs the measured process nothing but the CPU py-spy itself takes."""
    if directory is None:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).with_name("py-spy")
    recorders = [
        subprocess.Popen(
            [
                *(str(py_spy), "record", "--nonblocking", "--rate", str(_PROFILE_RATE_HZ)),
                *("--format", "flamegraph", "--pid", str(pid)),
                *("--output", str(directory / f"{name}.svg")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for name, pid in pids.items()
    ]
    log(f"profiling {len(recorders)} processes into {directory}")
    try:
        yield
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)
        for recorder, name in zip(recorders, pids, strict=True):
            _, errors = recorder.communicate(timeout=60)
            if recorder.returncode not in (0, -signal.SIGINT):
                log(f"profiling {name} failed: {errors.decode().strip()[-300:]}")
