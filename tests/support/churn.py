"""REST churn for the fault tests and the soak: jobs submitted, scaled, updated and deleted by a
client that remembers what the API accepted, and checks later that the region holds it."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.harness import get_json, sleeper_job

STEPS = ("submit", "grow", "shrink", "delete")
"""What the churn does, in turn (`Churn(steps=...)`); `update` rolls out a new version."""


@dataclass
class Accepted:
    """What the API accepted for one job of the churn."""

    count: int
    version: str = "1"
    at_most_once: bool = False
    deleted: bool = False


@dataclass
class Operation:
    """One REST call of the churn, sent again until it gets a definite answer."""

    step: str
    method: str
    path: str
    body: dict[str, Any] | None
    handle: str
    headers: dict[str, str] = field(default_factory=dict)
    sent: int = 0


@dataclass(frozen=True)
class ServerError:
    """A 5xx answer, with when it came (monotonic) so that it can be set against the faults."""

    at: float
    status: int
    call: str


@dataclass
class JobsHeld:
    """How the region's jobs compare with what the churn was told it accepted."""

    lost: list[str] = field(default_factory=list)
    """Accepted jobs the region does not have."""
    wrong: list[str] = field(default_factory=list)
    """Jobs with another count or version than the last one accepted."""
    waiting: list[str] = field(default_factory=list)
    """Jobs not yet all running, or not yet gone after their deletion was accepted."""


class Churn(threading.Thread):
    """Submits, scales, updates and deletes jobs over REST until stopped, going through `urls`
    in turn when one does not answer; remembers what was accepted.

    A call that gets no answer, or a 503, is sent again as it was (a submission with the same
    Idempotency-Key): its outcome is unknown until it is answered. Every `at_most_once_every`-th
    submission (0: none) asks for an at-most-once job.
    """

    def __init__(
        self,
        urls: Sequence[str],
        token: str,
        entitlements: list[str],
        *,
        name: str = "churn",
        steps: Sequence[str] = STEPS,
        at_most_once_every: int = 0,
        interval_s: float = 0.4,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._urls = list(urls)
        self._token = token
        self._entitlements = itertools.cycle(entitlements)
        self._at_most_once_every = at_most_once_every
        self._interval_s = interval_s
        self.accepted: dict[str, Accepted] = {}
        self.unexpected: list[str] = []
        self.answered = 0
        self.retried = 0
        self.statuses: Counter[int] = Counter()
        self.server_errors: list[ServerError] = []
        self._numbers = itertools.count()
        self._steps = itertools.cycle(steps)
        self._stopping = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._idle = threading.Event()

    @property
    def requests(self) -> int:
        """Calls sent, each resend counted."""
        return self.answered + self.retried

    def stop(self) -> None:
        self._stopping.set()
        self._running.set()
        self.join(timeout=30)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No call is in flight or sent inside the block (an unanswered one waits for after)."""
        assert self.is_alive(), f"the {self.name} thread died"
        self._running.clear()
        assert self._idle.wait(timeout=30), f"the {self.name} did not pause"
        try:
            yield
        finally:
            self._idle.clear()
            self._running.set()

    def run(self) -> None:
        pending: Operation | None = None
        frontends = itertools.cycle(
            [
                httpx.Client(
                    base_url=url, headers={"Authorization": f"Bearer {self._token}"}, timeout=5
                )
                for url in self._urls
            ]
        )
        client = next(frontends)
        while not self._stopping.is_set():
            if not self._running.is_set():
                self._idle.set()
                self._running.wait()
                continue
            operation = pending or self._next()
            pending = None if operation is None else self._send(client, operation)
            if pending is not None:
                client = next(frontends)
            time.sleep(self._interval_s)

    def _live(self) -> list[str]:
        return [h for h, job in self.accepted.items() if not job.deleted]

    def _next(self) -> Operation | None:
        step, live = next(self._steps), self._live()
        if step == "submit" or not live:
            number = next(self._numbers)
            spec = sleeper_job(f"{self.name}-{number}", 1, entitlement=next(self._entitlements))
            every = self._at_most_once_every
            spec["at_most_once"] = bool(every) and number % every == every - 1
            handle = f"{spec['entitlement']}/{spec['name']}"
            key = {"Idempotency-Key": f"{self.name}-{number}"}
            return Operation("submit", "POST", "/v1/jobs", spec, handle, key)
        if step == "grow":
            return Operation("grow", "POST", f"/v1/jobs/{live[-1]}/scale", {"count": 3}, live[-1])
        if step == "shrink":
            return Operation("shrink", "POST", f"/v1/jobs/{live[-1]}/scale", {"count": 2}, live[-1])
        if step == "update":
            version = str(int(self.accepted[live[-1]].version) + 1)
            return Operation(
                "update", "PATCH", f"/v1/jobs/{live[-1]}", {"version": version}, live[-1]
            )
        if len(live) < 3:
            return None
        return Operation("delete", "DELETE", f"/v1/jobs/{live[0]}", None, live[0])

    def _send(self, client: httpx.Client, operation: Operation) -> Operation | None:
        """Sends the call; returns it when it must be sent again."""
        operation.sent += 1
        try:
            response = client.request(
                operation.method, operation.path, json=operation.body, headers=operation.headers
            )
        except httpx.HTTPError:
            self.retried += 1
            return operation
        status = response.status_code
        self.statuses[status] += 1
        if status >= 500:
            call = f"{operation.method} {operation.path}: {response.text[:300]}"
            self.server_errors.append(ServerError(time.monotonic(), status, call))
        if status == 503:
            self.retried += 1
            return operation
        self.answered += 1
        if not self._record(operation, status):
            self.unexpected.append(
                f"{operation.method} {operation.path}: {status} {response.text[:300]}"
            )
        return None

    def _record(self, operation: Operation, status: int) -> bool:
        """Remembers what an answer accepted; False if the answer was not one to expect."""
        body = operation.body or {}
        if operation.step == "submit" and status in (200, 201):
            self.accepted[operation.handle] = Accepted(
                body["count"], at_most_once=body["at_most_once"]
            )
        elif operation.step in ("grow", "shrink") and status == 200:
            self.accepted[operation.handle].count = body["count"]
        elif operation.step == "update" and status == 200:
            self.accepted[operation.handle].version = body["version"]
        elif operation.step == "delete" and (
            status == 202 or (status == 404 and operation.sent > 1)
        ):
            # A 404 after an unanswered attempt: that attempt deleted it.
            self.accepted[operation.handle].deleted = True
        else:
            return False
        return True

    def compare(self, client: httpx.Client) -> JobsHeld:
        """What the region holds of what was accepted, now."""
        listed = {job["handle"]: job for job in get_json(client, "/v1/jobs")["jobs"]}
        held = JobsHeld()
        for handle, accepted in self.accepted.items():
            job = listed.get(handle)
            if accepted.deleted:
                if job is not None:
                    held.waiting.append(f"{handle} is not deleted yet")
            elif job is None:
                held.lost.append(handle)
            elif (job["spec"]["count"], job["spec"]["task"]["version"]) != (
                accepted.count,
                accepted.version,
            ):
                held.wrong.append(f"{handle} is {job['spec']}, accepted as {accepted}")
            elif job["running"] != accepted.count or sum(job["tasks"].values()) != job["running"]:
                held.waiting.append(f"{handle} runs {job['running']} of {accepted.count}")
        return held

    def check(self, client: httpx.Client, timeout_s: float = 30) -> None:
        """Every accepted job exists as accepted, and soon runs all its tasks; every job whose
        deletion was accepted is soon gone."""
        assert self.unexpected == []
        deadline = time.monotonic() + timeout_s
        while True:
            held = self.compare(client)
            # Written before the answer: never missing, never another count or version.
            assert held.lost == [], f"accepted jobs lost: {held.lost}"
            assert held.wrong == []
            if not held.waiting:
                return
            assert time.monotonic() < deadline, f"jobs not as accepted: {held.waiting}"
            time.sleep(0.3)
