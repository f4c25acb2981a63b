"""Host profiles: the machine-level settings an entitlement's tasks need (the Sidekick role)."""

from __future__ import annotations

from typing import Final

from pydantic import Field

from tether.model.base import Name, Seconds, TetherModel

MAX_SWITCH_S: Final = 24 * 3600
"""The longest a switch may be said to take: an agent waits that long."""


class HostProfile(TetherModel):
    """A named set of host settings and how long a machine takes to switch to them."""

    name: Name
    description: str = ""
    settings: dict[str, str] = Field(default_factory=dict)
    """Handed to the agent's profile hook as TETHER_HOST_PROFILE_SETTINGS (a JSON object)."""
    switch_seconds: Seconds = Field(default=0.0, le=MAX_SWITCH_S)
    """The least time a switch to the profile takes, the hook included."""
