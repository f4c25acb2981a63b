"""What every script under scripts/ shares: progress on stderr, a clean stop on a signal, and
where its plots go."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

_STARTED = time.monotonic()

RESULTS_DIR = Path(__file__).resolve().parents[2] / "bench-results"
"""Where plots go unless a script is told otherwise: git ignores it, so a run leaves the
source tree as it found it."""


def log(message: str) -> None:
    """Progress for people, on stderr (stdout carries only the result's JSON line)."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def default_plot(name: str) -> Path:
    """The path of the plot `name` when the user names none: in `RESULTS_DIR`."""
    return RESULTS_DIR / name


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
