"""What a shim does to confine its task, with the standard library alone (a shim starts with
every task, and every import it makes is paid then): cgroups to join before the exec, an
address-space cap, and the cgroups removed at the end."""

from __future__ import annotations

import enum
import os
import resource
from collections.abc import Iterable
from pathlib import Path


class LimitMode(enum.StrEnum):
    """How a task's limits are enforced; the value is what TaskStatus.limits reports."""

    CGROUP_V2 = "cgroup-v2"
    CGROUP_V1 = "cgroup-v1"
    RLIMIT = "rlimit"
    NONE = "none"


def remove_cgroups(cgroups: Iterable[Path]) -> None:
    """Removes the task's cgroups, best effort: one that still holds a process stays."""
    for cgroup in cgroups:
        try:
            cgroup.rmdir()
        except OSError:
            continue  # still holding a process, or gone already


def join_cgroups(procs_files: Iterable[str]) -> None:
    """Moves the calling process into the cgroups (run in the task's process before exec)."""
    pid = str(os.getpid()).encode()
    for procs in procs_files:
        fd = os.open(procs, os.O_WRONLY)
        try:
            os.write(fd, pid)
        finally:
            os.close(fd)


def limit_address_space(memory_bytes: int) -> None:
    """RLIMIT_AS for the calling process (run in the task's process before exec)."""
    if memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
