"""Host profiles on the agent: the switch a machine makes before it runs its entitlement's tasks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import pydantic

from tether.agent.settings import AgentSettings
from tether.agent.workdir import read_record, write_record
from tether.aio import cancel_and_wait, wait_set
from tether.model import Allocation, HostProfile, Name, TetherModel, Timestamp, from_json
from tether.store import KeyValue, Store, StoreError, keys
from tether.store.mirror import PrefixMirror

_log = logging.getLogger(__name__)

RETRY_MAX_S: Final = 60.0
"""The longest pause between two attempts at a failing switch."""
HOOK_OUTPUT_CHARS: Final = 200
"""How much of the hook's last output line a failure message quotes."""


class CurrentProfile(TetherModel):
    """The profile the machine last finished switching to, kept in the agent's work dir so that
    a restarted agent does not switch again."""

    name: Name
    switched_at: Timestamp


class SwitchFailed(Exception):
    """A switch that did not complete; the message says why, for logs and task statuses."""


def wanted_profile(target: str | None, current: str | None) -> str | None:
    """The profile to switch to, or None when no switch is due (a None target keeps whatever
    the machine carries)."""
    return target if target is not None and target != current else None


def waiting_message(profile: str, failure: str | None) -> str:
    """What a task that may not start yet reports while its machine switches to `profile`."""
    if failure is None:
        return f"waiting for host profile {profile} (switching)"
    return f"waiting for host profile {profile} (switch failed: {failure}; retrying)"


def retry_delay(failures: int, first_s: float) -> float:
    """The pause after the `failures`-th failed switch in a row: doubling, at most RETRY_MAX_S."""
    return min(first_s * 2.0 ** (failures - 1), RETRY_MAX_S)


def hook_environment(profile: str, settings: dict[str, str], machine_id: str) -> dict[str, str]:
    """The agent's environment plus what the hook needs to know about the switch."""
    return {
        **os.environ,
        "TETHER_MACHINE": machine_id,
        "TETHER_HOST_PROFILE": profile,
        "TETHER_HOST_PROFILE_SETTINGS": json.dumps(settings, sort_keys=True),
    }


async def run_hook(argv: list[str], env: dict[str, str], timeout_s: float) -> None:
    """Runs the hook (no shell, its own session); raises SwitchFailed unless it exits 0 in time.

    The hook and whatever it started in its session are killed on a timeout or when the caller
    is cancelled (the agent stops), so that no half-done switch runs on unseen.
    """
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError as error:
        raise SwitchFailed(f"cannot run the hook {argv[0]!r}: {error}") from error
    try:
        async with asyncio.timeout(timeout_s):
            output, _ = await process.communicate()
    except TimeoutError:
        raise SwitchFailed(f"the hook did not finish within {timeout_s:g} s") from None
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    if process.returncode != 0:
        lines = output.decode(errors="replace").strip().splitlines()
        detail = f": {lines[-1][:HOOK_OUTPUT_CHARS]}" if lines else ""
        raise SwitchFailed(f"the hook exited with code {process.returncode}{detail}")


class HostProfiles:
    """Keeps the machine on the host profile its allocation record asks for.

    Allocators set `host_profile` in `allocations/<machine>` when they move the machine into an
    entitlement. This follows that one record (a watch on its key, which as a prefix also matches
    the machine's allocation entries and longer machine ids, hence the exact-key filter),
    switches when the target differs from the current profile, and retries a failed switch with a
    doubling pause. `on_switched` runs after every completed switch, with the new profile already
    persisted.
    """

    def __init__(
        self,
        store: Store,
        machine_id: str,
        settings: AgentSettings,
        state_file: Path,
        on_switched: Callable[[str], Awaitable[None]],
    ) -> None:
        self._store = store
        self._machine_id = machine_id
        self._settings = settings
        self._state_file = state_file
        self._on_switched = on_switched
        self._key = keys.allocation(machine_id)
        self._mirror = PrefixMirror(store, self._key, self._allocation_changed)
        self.current: str | None = None
        self.target: str | None = None
        self._target_revision = 0
        """Mod revision of the allocation record `target` was read from."""
        self._failure: tuple[str, str] | None = None
        """The profile whose last switch failed, and why."""
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None

    def load(self) -> str | None:
        """Reads the profile the machine carries from the work dir; returns it."""
        record = read_record(CurrentProfile, self._state_file)
        self.current = None if record is None else record.name
        return self.current

    async def start(self) -> None:
        await self._mirror.start()
        self._take(self._mirror.items.get(self._key))
        self._worker = asyncio.create_task(
            self._switch_forever(), name=f"host profiles {self._machine_id}"
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._worker)
        self._worker = None
        await self._mirror.stop()

    @property
    def wanted(self) -> str | None:
        """The profile a switch is due to, if any."""
        return wanted_profile(self.target, self.current)

    async def blocking(self) -> str | None:
        """Why new tasks must wait, or None when they may start.

        When no switch seems due, the allocation record is read again first: the allocator
        writes it before the scheduler writes the assignment, but the two watches may deliver
        them in either order, and a task must not start before its machine's switch.
        """
        if self.wanted is None:
            self._take(await self._store.get(self._key))
        profile = self.wanted
        if profile is None:
            return None
        failure = self._failure
        return waiting_message(profile, failure[1] if failure and failure[0] == profile else None)

    async def _allocation_changed(self, changed: set[str]) -> None:
        if self._key in changed:
            self._take(self._mirror.items.get(self._key))

    def _take(self, kv: KeyValue | None) -> None:
        """Adopts the target of the allocation record in `kv` unless an as new one is known."""
        if kv is None:
            # No record (yet, or any more): nothing asks for a profile.
            self.target = None
            return
        if kv.mod_revision < self._target_revision:
            return
        try:
            allocation = from_json(Allocation, kv.value, stored=True)
        except pydantic.ValidationError as error:
            _log.warning("ignoring malformed allocation record %s: %s", kv.key, error)
            return
        self._target_revision = kv.mod_revision
        if allocation.host_profile != self.target:
            self.target = allocation.host_profile
            self._wake.set()

    async def _switch_forever(self) -> None:
        failures = 0
        while True:
            # Cleared before looking: a target that changes from here on wakes the waits below.
            self._wake.clear()
            profile = self.wanted
            if profile is None:
                self._failure = None
                await self._wake.wait()
                continue
            try:
                await self._switch(profile)
            except SwitchFailed as error:
                repeated = self._failure is not None and self._failure[0] == profile
                failures = failures + 1 if repeated else 1
                delay = retry_delay(failures, self._settings.profile_retry_s)
                self._failure = (profile, str(error))
                _log.warning(
                    "switch to host profile %s failed: %s; retrying in %.1f s",
                    profile,
                    error,
                    delay,
                )
                # A new target is tried at once; the same one after the pause.
                await wait_set(self._wake, delay)

    async def _switch(self, profile: str) -> None:
        started = time.monotonic()
        record = await self._record(profile)
        _log.info(
            "switching host profile %s -> %s (at least %.1f s)",
            self.current,
            profile,
            record.switch_seconds,
        )
        argv = self._settings.profile_hook_argv
        if argv:
            await run_hook(
                argv,
                hook_environment(profile, record.settings, self._machine_id),
                self._settings.profile_hook_timeout_s,
            )
        await asyncio.sleep(max(0.0, record.switch_seconds - (time.monotonic() - started)))
        write_record(self._state_file, CurrentProfile(name=profile, switched_at=datetime.now(UTC)))
        self.current, self._failure = profile, None
        _log.info("switched to host profile %s in %.2f s", profile, time.monotonic() - started)
        await self._on_switched(profile)

    async def _record(self, profile: str) -> HostProfile:
        """The profile's record; without one, no settings and the agent's default duration."""
        try:
            kv = await self._store.get(keys.host_profile(profile))
        except StoreError as error:
            raise SwitchFailed(f"cannot read host profile {profile}: {error}") from error
        if kv is None:
            return HostProfile(name=profile, switch_seconds=self._settings.profile_switch_s)
        try:
            return from_json(HostProfile, kv.value, stored=True)
        except pydantic.ValidationError as error:
            _log.error("malformed host profile record %s: %s", kv.key, error)
            raise SwitchFailed(f"the record of host profile {profile} is malformed") from error
