"""FastAPI dependencies: the app's store, settings, agent HTTP client and allocator client."""

from __future__ import annotations

from typing import Annotated

import httpx
from fastapi import Depends, Request

from tether.frontend.allocators import Allocators
from tether.frontend.settings import FrontendSettings
from tether.store import Store


def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def _settings(request: Request) -> FrontendSettings:
    settings: FrontendSettings = request.app.state.settings
    return settings


def _agents(request: Request) -> httpx.AsyncClient:
    agents: httpx.AsyncClient = request.app.state.agents
    return agents


def _allocators(request: Request) -> Allocators:
    allocators: Allocators = request.app.state.allocators
    return allocators


StoreDep = Annotated[Store, Depends(_store)]
SettingsDep = Annotated[FrontendSettings, Depends(_settings)]
AgentsDep = Annotated[httpx.AsyncClient, Depends(_agents)]
"""The HTTP client for agents' log endpoints, open while the app runs."""
AllocatorsDep = Annotated[Allocators, Depends(_allocators)]
"""The client of the allocator replicas; its channels close with the app."""
