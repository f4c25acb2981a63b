"""Tether's Python SDK: a typed client of the frontend's REST API."""

from tether.sdk.client import DEFAULT_TAIL_BYTES, JSON, YAML, LogStream, TetherClient
from tether.sdk.errors import FieldError, TetherAPIError, TetherConnectionError, TetherError
from tether.sdk.settings import ClientSettings
from tether.sdk.views import (
    RUNNING,
    AllocatorView,
    ChosenMachineView,
    JobView,
    MachineView,
    PlacementPreferenceView,
    PlacementRuleView,
    PlacementView,
    PrincipalToken,
    RegionView,
    ResourcesView,
    ShardDetailView,
    ShardView,
    TaskView,
    TopologyView,
)

__all__ = [
    "DEFAULT_TAIL_BYTES",
    "JSON",
    "RUNNING",
    "YAML",
    "AllocatorView",
    "ChosenMachineView",
    "ClientSettings",
    "FieldError",
    "JobView",
    "LogStream",
    "MachineView",
    "PlacementPreferenceView",
    "PlacementRuleView",
    "PlacementView",
    "PrincipalToken",
    "RegionView",
    "ResourcesView",
    "ShardDetailView",
    "ShardView",
    "TaskView",
    "TetherAPIError",
    "TetherClient",
    "TetherConnectionError",
    "TetherError",
    "TopologyView",
]
