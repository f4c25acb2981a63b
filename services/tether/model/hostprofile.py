"""Host profiles: the machine-level settings an entitlement's tasks need (the Sidekick role)."""

from __future__ import annotations

from pydantic import Field

from tether.model.base import Name, Seconds, TetherModel


class HostProfile(TetherModel):
    """A named set of host settings and how long a machine takes to switch to them."""

    name: Name
    description: str = ""
    settings: dict[str, str] = Field(default_factory=dict)
    """Handed to the agent's profile hook as TETHER_HOST_PROFILE_SETTINGS (a JSON object)."""
    switch_seconds: Seconds = 0.0
    """The least time a switch to the profile takes, the hook included."""
