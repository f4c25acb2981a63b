"""The agent's settings, read from TETHER_AGENT_* environment variables."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from tether.config import TlsSettings

CgroupMode = Literal["auto", "v2", "v1", "none"]


class AgentSettings(BaseSettings):
    """How the agent keeps its lease, where it keeps task files, how it limits tasks and how it
    switches host profiles."""

    model_config = SettingsConfigDict(env_prefix="TETHER_AGENT_", extra="ignore")

    tls: TlsSettings = Field(
        default_factory=TlsSettings, description="TLS of its servers and clients: TETHER_TLS_*."
    )

    lease_ttl_s: int = Field(
        default=6,
        ge=1,
        description="TTL of the heartbeat's lease: a dead machine's heartbeat vanishes within it "
        "(and the health checker's grace later, it is down).",
    )
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
    progress_interval_s: float = Field(
        default=5.0,
        ge=1.0,
        description="How often a running task's progress file is read, and its steps reported "
        "when they changed (each report is a store write).",
    )
    kill_grace_s: float = Field(
        default=5.0, gt=0, le=300, description="SIGTERM to SIGKILL grace when stopping a task."
    )
    keep_attempts: int = Field(
        default=3, ge=1, description="Attempt directories (with logs) kept per task."
    )
    profile_hook: str = Field(
        default="",
        description="Command that switches the machine to a host profile, split like a shell "
        "command line but run without a shell, with TETHER_HOST_PROFILE and "
        "TETHER_HOST_PROFILE_SETTINGS (JSON) in its environment; empty: no hook.",
    )
    profile_hook_timeout_s: float = Field(
        default=300.0, gt=0, description="How long the hook may run before it counts as failed."
    )
    profile_switch_s: float = Field(
        default=0.0,
        ge=0,
        description="Least duration of a switch to a profile that has no HostProfile record "
        "(a record's switch_seconds applies otherwise).",
    )
    profile_retry_s: float = Field(
        default=1.0,
        gt=0,
        description="Pause before retrying a failed switch; doubles with every failure.",
    )

    @field_validator("profile_hook")
    @classmethod
    def _hook_splits(cls, hook: str) -> str:
        shlex.split(hook)  # raises ValueError (unbalanced quotes): a settings error at start
        return hook

    @property
    def profile_hook_argv(self) -> list[str]:
        """The hook's command and arguments; empty when no hook is configured."""
        return shlex.split(self.profile_hook)
