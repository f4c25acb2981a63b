"""Host profile views: the stored record itself, and the list of them."""

from __future__ import annotations

from tether.frontend.schemas import View
from tether.model import HostProfile


class HostProfileList(View):
    host_profiles: list[HostProfile]
    """Every host profile, by name."""
