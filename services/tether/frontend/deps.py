"""FastAPI dependencies: the app's store, settings, agent HTTP client, allocator client, shard
counts and event hub."""

from __future__ import annotations

from typing import Annotated

import httpx
from fastapi import Depends, Request

from tether.frontend.allocators import Allocators
from tether.frontend.events.hub import EventHub
from tether.frontend.queue_index import QueueIndex
from tether.frontend.settings import FrontendSettings
from tether.frontend.shard_counts import ShardCounts
from tether.store import Store
from tether.store.cache import StoreCache

# Coroutines, though they never wait: FastAPI runs a plain function dependency in a worker
# thread, and handing every request to threads twice cost the frontend a third of its CPU.


async def _store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


async def _settings(request: Request) -> FrontendSettings:
    settings: FrontendSettings = request.app.state.settings
    return settings


async def _cache(request: Request) -> StoreCache:
    cache: StoreCache = request.app.state.cache
    return cache


async def _agents(request: Request) -> httpx.AsyncClient:
    agents: httpx.AsyncClient = request.app.state.agents
    return agents


async def _allocators(request: Request) -> Allocators:
    allocators: Allocators = request.app.state.allocators
    return allocators


async def _events(request: Request) -> EventHub:
    hub: EventHub = request.app.state.events
    return hub


async def _queue_index(request: Request) -> QueueIndex:
    index: QueueIndex = request.app.state.queue_index
    return index


async def _shard_counts(request: Request) -> ShardCounts:
    counts: ShardCounts = request.app.state.shard_counts
    return counts


StoreDep = Annotated[Store, Depends(_store)]
SettingsDep = Annotated[FrontendSettings, Depends(_settings)]
CacheDep = Annotated[StoreCache, Depends(_cache)]
"""The frontend's watch-fed copy of what GET requests read (`revisions.ReadsDep` reads it)."""
AgentsDep = Annotated[httpx.AsyncClient, Depends(_agents)]
"""The HTTP client for agents' log endpoints, open while the app runs."""
AllocatorsDep = Annotated[Allocators, Depends(_allocators)]
"""The client of the allocator replicas; its channels close with the app."""
EventsDep = Annotated[EventHub, Depends(_events)]
"""The region's event feed, shared by this frontend's followers (started by the first)."""
QueueIndexDep = Annotated[QueueIndex, Depends(_queue_index)]
"""Every entitlement's waiting jobs in order, kept by this process's watch while the app runs."""
ShardCountsDep = Annotated[ShardCounts, Depends(_shard_counts)]
"""What each shard holds, kept by this process's watches while the app runs."""
