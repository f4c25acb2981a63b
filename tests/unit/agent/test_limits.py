"""Limit mode detection and the cgroup files the limiter writes, on a fake cgroup root."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tether.agent.confine import LimitMode
from tether.agent.limits import (
    CPU_PERIOD_US,
    MIB,
    MIN_CPU_QUOTA_US,
    Limiter,
    Limits,
    available_modes,
    cpu_quota_us,
)
from tether.model import Resources

LIMITS = Limits(memory_bytes=64 * MIB, cpu_millicores=500)


def fake_v2(root: Path) -> Path:
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    return root


def fake_v1(root: Path) -> Path:
    for controller, control in (("memory", "memory.limit_in_bytes"), ("cpu", "cpu.cfs_quota_us")):
        (root / controller).mkdir()
        (root / controller / control).write_text("-1\n")
    return root


def test_limits_from_resources_and_cpu_quota() -> None:
    assert Limits.of(Resources(cpu=1500, memory_mib=2)) == Limits(2 * MIB, 1500)
    assert not Limits.of(Resources(disk_gib=3))
    assert cpu_quota_us(500) == CPU_PERIOD_US // 2
    assert cpu_quota_us(2000) == 2 * CPU_PERIOD_US
    assert cpu_quota_us(1) == MIN_CPU_QUOTA_US


def test_detection_order(tmp_path: Path) -> None:
    assert available_modes(tmp_path, "auto") == [LimitMode.RLIMIT]
    fake_v1(tmp_path)
    assert available_modes(tmp_path, "auto") == [LimitMode.CGROUP_V1, LimitMode.RLIMIT]
    fake_v2(tmp_path)
    assert available_modes(tmp_path, "auto") == [
        LimitMode.CGROUP_V2,
        LimitMode.CGROUP_V1,
        LimitMode.RLIMIT,
    ]
    assert available_modes(tmp_path, "v1") == [LimitMode.CGROUP_V1, LimitMode.RLIMIT]
    assert available_modes(tmp_path, "none") == [LimitMode.NONE]


def test_v2_writes_limits_and_enables_controllers(tmp_path: Path) -> None:
    root = fake_v2(tmp_path)
    placement = Limiter(root, "auto", "m1").prepare("e.j.0.1", LIMITS)
    cgroup = root / "tether" / "m1" / "e.j.0.1"
    assert placement.mode is LimitMode.CGROUP_V2
    assert placement.cgroups == (cgroup,)
    assert placement.procs_files == [cgroup / "cgroup.procs"]
    assert (cgroup / "memory.max").read_text() == str(64 * MIB)
    assert (cgroup / "cpu.max").read_text() == f"50000 {CPU_PERIOD_US}"
    for parent in (root, root / "tether", root / "tether" / "m1"):
        assert (parent / "cgroup.subtree_control").read_text() == "+memory +cpu"


def test_v2_only_enables_what_is_limited(tmp_path: Path) -> None:
    root = fake_v2(tmp_path)
    placement = Limiter(root, "auto", "m1").prepare("e.j.0.1", Limits(memory_bytes=MIB))
    assert (root / "cgroup.subtree_control").read_text() == "+memory"
    assert not (placement.cgroups[0] / "cpu.max").exists()


def test_v1_uses_each_controllers_hierarchy(tmp_path: Path) -> None:
    root = fake_v1(tmp_path)
    placement = Limiter(root, "auto", "m1").prepare("e.j.3.2", LIMITS)
    memory = root / "memory" / "tether" / "m1" / "e.j.3.2"
    cpu = root / "cpu" / "tether" / "m1" / "e.j.3.2"
    assert placement.mode is LimitMode.CGROUP_V1
    assert placement.cgroups == (memory, cpu)
    assert (memory / "memory.limit_in_bytes").read_text() == str(64 * MIB)
    assert (cpu / "cpu.cfs_period_us").read_text() == str(CPU_PERIOD_US)
    assert (cpu / "cpu.cfs_quota_us").read_text() == "50000"


def test_v1_without_cpu_limit_makes_no_cpu_group(tmp_path: Path) -> None:
    root = fake_v1(tmp_path)
    placement = Limiter(root, "auto", "m1").prepare("e.j.0.1", Limits(memory_bytes=MIB))
    assert placement.cgroups == (root / "memory" / "tether" / "m1" / "e.j.0.1",)
    assert not (root / "cpu" / "tether").exists()


def test_a_failing_mode_falls_back_once_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = fake_v1(fake_v2(tmp_path))
    # A file where the v2 group must go: creating it fails like a read-only cgroupfs would.
    (root / "tether").write_text("")
    limiter = Limiter(root, "auto", "m1")
    with caplog.at_level(logging.WARNING):
        first = limiter.prepare("e.j.0.1", LIMITS)
        second = limiter.prepare("e.j.1.1", LIMITS)
    assert (first.mode, second.mode) == (LimitMode.CGROUP_V1, LimitMode.CGROUP_V1)
    warnings = [r.getMessage() for r in caplog.records if "falling back" in r.getMessage()]
    assert len(warnings) == 1
    assert "cgroup-v2" in warnings[0]


def test_rlimit_when_no_cgroup_is_writable(tmp_path: Path) -> None:
    (tmp_path / "memory").write_text("")  # v1 forced, but its hierarchy is not a directory
    placement = Limiter(tmp_path, "v1", "m1").prepare("e.j.0.1", LIMITS)
    assert placement == type(placement)(LimitMode.RLIMIT)


def test_no_limits_and_mode_none_make_no_cgroups(tmp_path: Path) -> None:
    root = fake_v2(tmp_path)
    assert Limiter(root, "auto", "m1").prepare("e.j.0.1", Limits()).mode is LimitMode.NONE
    assert Limiter(root, "none", "m1").prepare("e.j.0.1", LIMITS).mode is LimitMode.NONE
    assert not (root / "tether").exists()
