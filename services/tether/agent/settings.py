"""The agent's settings, read from TETHER_AGENT_* environment variables."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

CgroupMode = Literal["auto", "v2", "v1", "none"]


class AgentSettings(BaseSettings):
    """How the agent keeps its lease, where it keeps task files and how it limits tasks."""

    model_config = SettingsConfigDict(env_prefix="TETHER_AGENT_", extra="ignore")

    lease_ttl_s: int = Field(default=3, ge=1, description="TTL of the heartbeat's lease.")
    work_dir: Path | None = Field(
        default=None,
        description="Task files (specs, state, exit codes, logs, sandboxes); "
        "default .tether/agents/<machine id>.",
    )
    http_host: str = Field(default="127.0.0.1", description="Address of the log server.")
    http_port: int = Field(default=0, ge=0, le=65535, description="Log server port; 0: any.")
    cgroup_mode: CgroupMode = Field(
        default="auto",
        description="How to limit tasks: auto (cgroup v2, else v1, else rlimit), v2, v1 "
        "(falling back the same way when they fail), or none.",
    )
    cgroup_root: Path = Field(
        default=Path("/sys/fs/cgroup"), description="Where the cgroup filesystems are mounted."
    )
    poll_interval_s: float = Field(
        default=0.2, gt=0, le=10, description="How often the agent looks at its shims' files."
    )
    kill_grace_s: float = Field(
        default=5.0, gt=0, le=300, description="SIGTERM to SIGKILL grace when stopping a task."
    )
    keep_attempts: int = Field(
        default=3, ge=1, description="Attempt directories (with logs) kept per task."
    )
