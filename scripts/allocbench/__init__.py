"""The allocator benchmark's parts: synthetic region, job mix, fill loop, store audit, plot."""

from __future__ import annotations

import sys
import time

_STARTED = time.monotonic()


def log(message: str) -> None:
    """Progress for people, on stderr (stdout carries only the result's JSON line)."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)
