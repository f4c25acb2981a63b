"""Resource limits for tasks: cgroup v2, else cgroup v1, else RLIMIT_AS (memory only)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tether.agent.confine import LimitMode, remove_cgroups

if TYPE_CHECKING:
    from tether.model import Resources

_log = logging.getLogger(__name__)

CPU_PERIOD_US: Final = 100_000
MIN_CPU_QUOTA_US: Final = 1_000
"""The kernel refuses CFS quotas below 1 ms."""
MIB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """What one task may use; 0 in a dimension means no limit there."""

    memory_bytes: int = 0
    cpu_millicores: int = 0

    @classmethod
    def of(cls, resources: Resources) -> Limits:
        return cls(memory_bytes=resources.memory_mib * MIB, cpu_millicores=resources.cpu)

    def __bool__(self) -> bool:
        return bool(self.memory_bytes or self.cpu_millicores)


def cpu_quota_us(millicores: int) -> int:
    """The CFS quota per `CPU_PERIOD_US` that gives `millicores` thousandths of a CPU."""
    return max(MIN_CPU_QUOTA_US, millicores * CPU_PERIOD_US // 1000)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a task's limits live: its mode and the cgroup directories made for it."""

    mode: LimitMode
    cgroups: tuple[Path, ...] = ()

    @property
    def procs_files(self) -> list[Path]:
        """The files the task's process writes its pid into to join its cgroups."""
        return [cgroup / "cgroup.procs" for cgroup in self.cgroups]


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK)


def available_modes(root: Path, setting: str) -> list[LimitMode]:
    """The modes to try in order for the `cgroup_mode` setting; RLIMIT always ends the list, so
    a mode that fails falls back to the next one."""
    if setting == "none":
        return [LimitMode.NONE]
    v2 = (root / "cgroup.controllers").is_file() and _writable_dir(root)
    v1_controls = (("memory", "memory.limit_in_bytes"), ("cpu", "cpu.cfs_quota_us"))
    v1 = all(
        (root / controller / control).is_file() and _writable_dir(root / controller)
        for controller, control in v1_controls
    )
    if setting == "v2":
        return [LimitMode.CGROUP_V2, LimitMode.CGROUP_V1, LimitMode.RLIMIT]
    if setting == "v1":
        return [LimitMode.CGROUP_V1, LimitMode.RLIMIT]
    modes = [mode for mode, ok in ((LimitMode.CGROUP_V2, v2), (LimitMode.CGROUP_V1, v1)) if ok]
    return [*modes, LimitMode.RLIMIT]


class Limiter:
    """Makes each task's cgroups under `<root>[/<controller>]/tether/<machine>/`.

    The group lives under the hierarchy's root rather than under the agent's own cgroup, which
    may be nested (a container's) and is not where tasks belong. The first mode that fails is
    dropped for good, with the reason logged, so that a machine does not retry it per task.
    """

    def __init__(self, root: Path, setting: str, machine_id: str) -> None:
        self._root = root
        self._machine = machine_id
        self._modes = available_modes(root, setting)
        _log.info("task limits: trying %s", ", ".join(self._modes))

    def prepare(self, name: str, limits: Limits) -> Placement:
        """Creates the cgroups of the task named `name` with `limits` written into them."""
        if not limits:
            return Placement(LimitMode.NONE)
        while True:
            mode = self._modes[0]
            created: list[Path] = []
            try:
                if mode is LimitMode.CGROUP_V2:
                    self._create_v2(name, limits, created)
                elif mode is LimitMode.CGROUP_V1:
                    self._create_v1(name, limits, created)
                return Placement(mode, tuple(created))
            except OSError as error:
                remove_cgroups(created)
                _log.warning(
                    "cannot limit tasks with %s (%s); falling back to %s",
                    mode,
                    error,
                    self._modes[1],
                )
                self._modes.pop(0)

    def _create_v2(self, name: str, limits: Limits, created: list[Path]) -> None:
        controllers = []
        if limits.memory_bytes:
            controllers.append("+memory")
        if limits.cpu_millicores:
            controllers.append("+cpu")
        parent = self._root
        # A controller reaches a cgroup only when every ancestor enables it for its children.
        for child in ("tether", self._machine):
            (parent / "cgroup.subtree_control").write_text(" ".join(controllers))
            parent = parent / child
            parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text(" ".join(controllers))
        cgroup = parent / name
        cgroup.mkdir(exist_ok=True)
        created.append(cgroup)
        if limits.memory_bytes:
            (cgroup / "memory.max").write_text(str(limits.memory_bytes))
        if limits.cpu_millicores:
            quota = cpu_quota_us(limits.cpu_millicores)
            (cgroup / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}")

    def _create_v1(self, name: str, limits: Limits, created: list[Path]) -> None:
        if limits.memory_bytes:
            cgroup = self._v1_group("memory", name, created)
            (cgroup / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
        if limits.cpu_millicores:
            cgroup = self._v1_group("cpu", name, created)
            (cgroup / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
            (cgroup / "cpu.cfs_quota_us").write_text(str(cpu_quota_us(limits.cpu_millicores)))

    def _v1_group(self, controller: str, name: str, created: list[Path]) -> Path:
        cgroup = self._root / controller / "tether" / self._machine / name
        cgroup.mkdir(parents=True, exist_ok=True)
        created.append(cgroup)
        return cgroup
