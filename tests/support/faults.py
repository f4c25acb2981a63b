"""Helpers of the fault tests (tests/e2e/test_faults_*.py): jobs over REST, processes, and the
store as the region sees it."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.harness import LocalRegion, tasks_of
from tether.region.supervisor import process_alive
from tether.store import KeyValue, keys, open_store


def pids_by_index(client: httpx.Client, handle: str) -> dict[int, int | None]:
    return {t["index"]: t["pid"] for t in tasks_of(client, handle)}


def dead_services(region: LocalRegion, pids: dict[str, int]) -> list[str]:
    """The services of `pids` (name -> pid) that no longer run, and `tether up` if it exited."""
    dead = [name for name, pid in pids.items() if not process_alive(pid)]
    if region.process is None or region.process.poll() is not None:
        dead.append("tether up")
    return dead


def read_key(url: str, key: str) -> KeyValue | None:
    """`key` as the store at `url` holds it now."""

    async def read() -> KeyValue | None:
        async with open_store(url) as store:
            return await store.get(key)

    return asyncio.run(read())


def write_key(url: str, key: str, value: bytes | None) -> None:
    """Puts `value` under `key` in the store at `url`, or deletes the key if `value` is None."""

    async def write() -> None:
        async with open_store(url) as store:
            if value is None:
                await store.delete(key)
            else:
                await store.put(key, value)

    asyncio.run(write())


def machine_versions(url: str) -> dict[str, int]:
    """Machine id -> version of its record in the store at `url`.

    A machine's state changes only by a write of its record (the health checker's, the
    broker's): a machine that went down, even for a moment, has a higher version afterwards.
    """

    async def read() -> dict[str, int]:
        async with open_store(url) as store:
            listed = await store.range(keys.MACHINES)
        return {keys.last_segment(kv.key): kv.version for kv in listed.kvs}

    return asyncio.run(read())


@dataclass(frozen=True)
class TaskProcess:
    """A task's process, as its environment names it."""

    pid: int
    task_id: str
    attempt: int
    machine: str


def task_processes(state_dir: Path) -> list[TaskProcess]:
    """The region's task processes: those running in a sandbox under its directory."""
    marker = str(state_dir.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not os.readlink(entry / "cwd").startswith(marker):
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        variables = dict(item.decode(errors="replace").partition("=")[::2] for item in environ)
        if "TETHER_TASK_ID" in variables and process_alive(int(entry.name)):
            found.append(
                TaskProcess(
                    int(entry.name),
                    variables["TETHER_TASK_ID"],
                    int(variables["TETHER_TASK_ATTEMPT"]),
                    variables["TETHER_MACHINE"],
                )
            )
    return found


class TwiceSampler(threading.Thread):
    """Samples the region's task processes every `interval_s` until stopped, and records the
    most processes each task index ever ran as at one sample, for how long it ran as more than
    one, and every attempt of it seen running."""

    def __init__(self, state_dir: Path, interval_s: float = 0.1) -> None:
        super().__init__(name="twice-sampler", daemon=True)
        self._state_dir = state_dir
        self._interval_s = interval_s
        self._stopping = threading.Event()
        self.most: dict[str, int] = {}
        self.twice_s: dict[str, float] = {}
        """Task id -> seconds (from each sample to the next) it ran as two processes or more."""
        self.attempts: dict[str, dict[int, str]] = {}
        """Task id -> attempt -> the machine it was seen running on."""
        self.samples = 0
        self._first_wait = self._last_sample = 0.0

    @property
    def mean_interval_s(self) -> float:
        """The mean seconds from one sample to the next (inf before the first): how short a
        second process may live and still be missed."""
        if not self.samples:
            return float("inf")
        return (self._last_sample - self._first_wait) / self.samples

    def run(self) -> None:
        previous = self._first_wait = time.monotonic()
        while not self._stopping.wait(self._interval_s):
            processes = task_processes(self._state_dir)
            now = time.monotonic()
            for process in processes:
                self.attempts.setdefault(process.task_id, {})[process.attempt] = process.machine
            for task_id, count in Counter(p.task_id for p in processes).items():
                self.most[task_id] = max(count, self.most.get(task_id, 0))
                if count > 1:
                    self.twice_s[task_id] = self.twice_s.get(task_id, 0.0) + now - previous
            previous = self._last_sample = now
            self.samples += 1

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)
