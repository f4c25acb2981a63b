"""Atomic file writes, with the standard library only: the shim writes its records with it."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Writes `data` to `path` so that readers see the old file or the whole new one."""
    # Not tempfile.mkstemp: importing tempfile cost every shim's start a tenth of its imports.
    temporary = path.parent / f".{path.name}.{os.urandom(6).hex()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
