"""`replicas`: never more than `max_down` replicas of any shard down at once."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import httpx
import orjson

from tether.taskcontrol.appsched.base import (
    Decision,
    ReferenceController,
    Situation,
    task_indexes,
)

_log = logging.getLogger(__name__)

SHARD_MAP_FORMAT: Final = '{"shards": {"<shard>": [task indexes...]}}'
FETCH_TIMEOUT_S: Final = 1.0
"""Deadline of one shard map request: well inside the few seconds Tether waits for an answer."""

ShardReplicas = tuple[tuple[int, int], ...]
"""(shard number, how many of the shard's replicas) pairs, for the replicas one task holds."""


class ShardMapError(ValueError):
    """A shard map that cannot be read or is not of the form SHARD_MAP_FORMAT."""


@dataclass(frozen=True, slots=True)
class ShardMap:
    """Which shard replicas each task holds, indexed once per load so that deciding is cheap."""

    shard_names: tuple[str, ...]
    """Shard number -> the shard's name in the map."""
    replicas_by_task: Mapping[int, ShardReplicas]
    """Task index -> the replicas it holds; tasks that hold none are absent."""

    @classmethod
    def parse(cls, document: bytes) -> ShardMap:
        """A map from its JSON, SHARD_MAP_FORMAT; ShardMapError says what is wrong."""
        try:
            loaded = orjson.loads(document)
        except orjson.JSONDecodeError as error:
            raise ShardMapError(f"not JSON: {error}") from None
        shards = loaded.get("shards") if isinstance(loaded, dict) else None
        if not isinstance(shards, dict) or not shards:
            raise ShardMapError(f"expected {SHARD_MAP_FORMAT} with at least one shard")
        by_task: dict[int, Counter[int]] = {}
        for number, (name, tasks) in enumerate(shards.items()):
            # `type(...) is int`: JSON's true and false are ints to isinstance.
            if not isinstance(tasks, list) or not all(type(t) is int and t >= 0 for t in tasks):
                raise ShardMapError(
                    f"shard {name!r}: expected a list of task indexes (integers from 0)"
                )
            for task in tasks:
                by_task.setdefault(task, Counter())[number] += 1
        return cls(tuple(shards), {task: tuple(held.items()) for task, held in by_task.items()})

    def replicas_down(self, tasks: Iterable[int]) -> list[int]:
        """Per shard number, how many of its replicas the given down tasks hold."""
        down = [0] * len(self.shard_names)
        for task in tasks:
            for shard, replicas in self.replicas_by_task.get(task, ()):
                down[shard] += replicas
        return down

    def replicas_of(self, tasks: frozenset[int]) -> ShardReplicas:
        """The replicas a set of tasks holds together."""
        if len(tasks) == 1:
            # The common case (one operation per task) needs no merging.
            return self.replicas_by_task.get(next(iter(tasks)), ())
        held: Counter[int] = Counter()
        for task in tasks:
            for shard, replicas in self.replicas_by_task.get(task, ()):
                held[shard] += replicas
        return tuple(held.items())


def read_shard_map(path: Path) -> ShardMap:
    """The map in a JSON file; ShardMapError names the file and the problem."""
    try:
        document = path.read_bytes()
    except OSError as error:
        raise ShardMapError(f"cannot read the shard map {path}: {error.strerror}") from None
    try:
        return ShardMap.parse(document)
    except ShardMapError as error:
        raise ShardMapError(f"shard map {path}: {error}") from None


class ShardMapEndpoint:
    """The application's shard map over HTTP, read again on every call: where the replicas are
    changes as the application rebalances, and the application knows it first."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._http = httpx.AsyncClient(timeout=FETCH_TIMEOUT_S)
        self._document: bytes | None = None
        self._map: ShardMap | None = None

    async def fetch(self) -> ShardMap | None:
        """The map the endpoint serves now; on any failure the last good one, or None when there
        has been none (then nothing may be acknowledged)."""
        try:
            response = await self._http.get(self.url)
        except httpx.HTTPError as error:
            return self._last_good(f"{type(error).__name__}: {error}")
        if response.status_code != httpx.codes.OK:
            return self._last_good(f"HTTP {response.status_code}")
        # Unchanged (the usual case): keep the index instead of building it again.
        if response.content != self._document:
            try:
                self._map = ShardMap.parse(response.content)
            except ShardMapError as error:
                return self._last_good(str(error))
            self._document = response.content
        return self._map

    def _last_good(self, problem: str) -> ShardMap | None:
        _log.warning(
            "shard map from %s: %s; %s",
            self.url,
            problem,
            "using the last one read" if self._map else "none read yet: acknowledging nothing",
        )
        return self._map

    async def close(self) -> None:
        await self._http.aclose()


def plan_replicas(situation: Situation, shard_map: ShardMap | None, max_down: int) -> Decision:
    """Acknowledges a large batch of pending operations that leaves no shard with more than
    `max_down` replicas down, counting unhealthy tasks and acknowledgements in flight.

    Operations whose shards are all whole come first (oldest first within each group): taking a
    replica of a shard that is already degraded uses up its last slack. Then it is greedy: an
    operation that does not fit waits, and the ones after it are still tried.
    """
    if shard_map is None:
        return Decision([], "no shard map has been read yet")
    down_tasks = set(situation.down)
    down = shard_map.replicas_down(down_tasks)
    new_tasks = [task_indexes(operation) - down_tasks for operation in situation.pending]
    held = [shard_map.replicas_of(tasks) for tasks in new_tasks]
    order = sorted(
        range(len(situation.pending)), key=lambda i: any(down[shard] for shard, _ in held[i])
    )
    acks: list[str] = []
    first_blocked: str | None = None
    for i in order:
        added = new_tasks[i] - down_tasks
        # Only when an operation acknowledged just now took some of the same tasks down.
        replicas = held[i] if added == new_tasks[i] else shard_map.replicas_of(added)
        blocking = next((shard for shard, n in replicas if down[shard] + n > max_down), None)
        if blocking is not None:
            if first_blocked is None:
                first_blocked = shard_map.shard_names[blocking]
            continue
        for shard, n in replicas:
            down[shard] += n
        down_tasks |= added
        acks.append(situation.pending[i].id)
    if first_blocked is None:
        return Decision(acks)
    return Decision(
        acks,
        f"each would leave a shard with more than {max_down} replica(s) down "
        f"(the first: shard {first_blocked!r})",
    )


class ReplicasController(ReferenceController):
    """Serves `plan_replicas` with a shard map from a file (read once) or from the application's
    HTTP endpoint (read on every call)."""

    def __init__(self, shard_map: ShardMap | ShardMapEndpoint, max_down: int) -> None:
        super().__init__()
        self.shard_map = shard_map
        self.max_down = max_down

    async def plan(self, situation: Situation) -> Decision:
        shard_map = (
            await self.shard_map.fetch()
            if isinstance(self.shard_map, ShardMapEndpoint)
            else self.shard_map
        )
        return plan_replicas(situation, shard_map, self.max_down)

    async def stop(self) -> None:
        await super().stop()
        if isinstance(self.shard_map, ShardMapEndpoint):
            await self.shard_map.close()
