"""The soak's fault injector: kill -9 of every kind of service process, an etcd member that
stops answering or dies, and an agent cut off from the region, one fault at a time."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.harness import LocalRegion, running_for
from tests.support.netns import Namespace
from tether.region.restarts import RestartPolicy
from tether.store.etcd_server import EtcdCluster

SERVICE_ROLES = ("frontend", "scheduler", "allocator", "broker", "health", "registry", "agent")
FAULT_KINDS = (
    *(f"kill_{role}" for role in SERVICE_ROLES),
    "pause_etcd",
    "kill_etcd",
    "partition_agent",
)
STORE_FAULTS = ("pause_etcd", "kill_etcd")
STORE_FAULT_AFTERMATH_S = 5.0
"""How long after an etcd member is back a 503 still counts as the fault's: clients move back
to a member within their health checks and deadlines."""
_NOT_TOO_SOON_S = RestartPolicy().fast_s + 2
"""A service is killed only once it has run this long: `tether up` gives up on a service that
keeps failing soon after it starts, and the soak must not make it look like one."""


@dataclass(frozen=True)
class Fault:
    kind: str
    target: str
    started: float
    """Monotonic time it began."""
    ended: float
    """Monotonic time it was undone (a kill: when it was sent)."""


@dataclass(frozen=True)
class FaultTimings:
    hold_s: float = 6.0
    """How long an etcd member stays stopped or dead."""
    partition_s: float = 22.0
    """How long the agent stays cut off: long enough for its machine to go down and its
    at-most-once tasks to be fenced and replaced (agent lease 2 s, health grace 2 s, the fencing
    period of 10 s and the scheduler's margin of 2 s), with time to spare."""
    gap_s: tuple[float, float] = (2.0, 5.0)
    """Pause between two faults, drawn uniformly."""


class FaultInjector(threading.Thread):
    """Injects faults until stopped or `rounds` rounds are done, one at a time, every kind in
    each round in a random order (`seed`), and undoes the one in progress when stopped."""

    def __init__(
        self,
        region: LocalRegion,
        cluster: EtcdCluster,
        namespace: Namespace,
        *,
        seed: int,
        timings: FaultTimings,
        log: Callable[[str], None],
        rounds: int | None = None,
    ) -> None:
        super().__init__(name="fault-injector", daemon=True)
        self._region = region
        self._cluster = cluster
        self._namespace = namespace
        self._random = random.Random(seed)
        self._timings = timings
        self._log = log
        self._rounds = rounds
        self._stopping = threading.Event()
        self.injected: list[Fault] = []
        self.skipped: Counter[str] = Counter()
        self.failure: BaseException | None = None

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=60)

    def in_store_fault(self, at: float) -> bool:
        """Whether an etcd member was faulty at monotonic time `at`, or had just come back."""
        return any(
            fault.started <= at <= fault.ended + STORE_FAULT_AFTERMATH_S
            for fault in self.injected
            if fault.kind in STORE_FAULTS
        )

    def counts(self) -> dict[str, int]:
        return dict(Counter(fault.kind for fault in self.injected))

    def run(self) -> None:
        try:
            done = 0
            while not self._stopping.is_set() and done != self._rounds:
                done += 1
                kinds = list(FAULT_KINDS)
                self._random.shuffle(kinds)
                for kind in kinds:
                    if self._stopping.wait(self._random.uniform(*self._timings.gap_s)):
                        return
                    self._inject(kind)
        except BaseException as exc:  # reported by the soak: a broken injector voids the run
            self.failure = exc

    def _inject(self, kind: str) -> None:
        started = time.monotonic()
        if kind.startswith("kill_") and kind != "kill_etcd":
            target = self._kill_service(kind.removeprefix("kill_"))
            if target is None:
                self.skipped[kind] += 1
                return
        elif kind in STORE_FAULTS:
            member = self._random.choice(self._cluster.members)
            target = member.name
            if kind == "pause_etcd":
                self._hold(member.pause, member.resume, self._timings.hold_s)
            else:
                self._hold(member.kill, member.start, self._timings.hold_s)
        else:
            target = self._namespace.name
            self._hold(self._namespace.cut, self._namespace.heal, self._timings.partition_s)
        fault = Fault(kind, target, started, time.monotonic())
        self.injected.append(fault)
        self._log(f"{kind} {target} ({fault.ended - fault.started:.1f} s)")

    def _hold(self, do: Callable[[], None], undo: Callable[[], None], seconds: float) -> None:
        """Does the fault, keeps it for `seconds` (less once stopped), and undoes it."""
        do()
        try:
            self._stopping.wait(seconds)
        finally:
            undo()

    def _kill_service(self, role: str) -> str | None:
        """SIGKILLs a random service of `role` that has run long enough; its name, or None."""
        candidates = [
            (name, pid)
            for name, pid in self._region.service_pids().items()
            if name.split("-")[0] == role and running_for(pid) >= _NOT_TOO_SOON_S
        ]
        if not candidates:
            return None
        name, pid = self._random.choice(sorted(candidates))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return name
