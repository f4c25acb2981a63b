"""Host profile switches on a real store: the agent follows its allocation record, runs the hook,
holds its tasks back until the switch is done, and announces the profile it carries."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.agent.helpers import (
    ENT,
    JOB,
    StartAgent,
    assign,
    read_status,
    stop,
    wait_status,
)
from tests.integration.agent.helpers import (
    machine as machine,
)
from tests.integration.agent.helpers import (
    region_config as region_config,
)
from tests.integration.agent.helpers import (
    start_agent as start_agent,
)
from tests.integration.agent.helpers import (
    work_dir as work_dir,
)
from tests.support.allocations import put_allocation
from tests.support.brokers import broker as broker
from tests.support.machines import read_machine
from tests.support.waiting import eventually
from tether.agent.profile import CurrentProfile
from tether.agent.workdir import WorkDir, read_record
from tether.broker.service import Broker
from tether.model import (
    AgentHeartbeat,
    Allocation,
    HostProfile,
    Machine,
    Resources,
    TaskState,
    TaskStatus,
    from_json,
    to_json,
)
from tether.store import Store, keys

SWITCH_S = 0.5
WEB_SETTINGS = {"vm.swappiness": "10", "net.core.somaxconn": "4096"}
HOOK = """#!/bin/sh
# Records what it was told, then waits for the test to let it finish (or fail).
dir=$(dirname "$0")
printf '%s|%s|%s|%s\\n' "$TETHER_HOST_PROFILE" "$TETHER_HOST_PROFILE_SETTINGS" \\
    "$TETHER_MACHINE" "$1" >> "$dir/marker"
while [ ! -e "$dir/gate" ]; do sleep 0.02; done
if [ -e "$dir/fail" ]; then echo "sysctl: cannot set vm.bogus" >&2; exit 3; fi
"""


@pytest.fixture
def hook(tmp_path: Path) -> Path:
    """The hook script; its directory holds `marker` (one line per run), `gate` and `fail`."""
    directory = tmp_path / "hook"
    directory.mkdir()
    script = directory / "switch-profile"
    script.write_text(HOOK)
    script.chmod(0o755)
    return script


def hook_settings(hook: Path) -> dict[str, object]:
    # The argument is split like a shell would, but no shell runs it.
    return {"profile_hook": f"{hook} 'two words'", "profile_hook_timeout_s": 20}


async def allocate(store: Store, machine_id: str, profile: str | None, *indexes: int) -> None:
    """What an allocator writes when it moves the machine into an entitlement and places the
    job's tasks `indexes` there: the record and, under its key, their entries."""
    allocation = Allocation(machine=machine_id, entitlement=ENT, host_profile=profile)
    tasks = {f"{ENT}/{JOB}/{index}": Resources(cpu=200, memory_mib=256) for index in indexes}
    await put_allocation(store, allocation, tasks)


async def read_heartbeat(store: Store, machine_id: str) -> AgentHeartbeat | None:
    kv = await store.get(keys.heartbeat(machine_id))
    return None if kv is None else from_json(AgentHeartbeat, kv.value, stored=True)


async def announced_profile(store: Store, machine_id: str) -> str | None:
    """The profile the machine's heartbeat says it carries (the heartbeat must be there)."""
    heartbeat = await read_heartbeat(store, machine_id)
    assert heartbeat is not None
    return heartbeat.machine.host_profile_current


async def wait_message(store: Store, index: int, text: str) -> TaskStatus:
    """The task's status once it is `placed` with a message that contains `text`."""
    status = await eventually(
        lambda: read_status(store, index),
        lambda seen: seen is not None and seen.state is TaskState.PLACED and text in seen.message,
        timeout_s=20,
        what=f"task {index} to wait with {text!r}",
    )
    assert status is not None
    return status


async def hook_runs(hook: Path) -> list[str]:
    """The marker's lines: one per run of the hook, with what it was told."""
    marker = hook.parent / "marker"
    return marker.read_text().splitlines() if marker.exists() else []


async def test_tasks_wait_for_the_switch_which_survives_a_restart(
    store: Store,
    start_agent: StartAgent,
    machine: Machine,
    hook: Path,
    work_dir: Path,
    broker: Broker,
) -> None:
    profile = HostProfile(name="web", settings=WEB_SETTINGS, switch_seconds=SWITCH_S)
    await store.put(keys.host_profile("web"), to_json(profile))
    # A machine whose id extends this one's: its allocation key is under this one's as a prefix.
    await allocate(store, machine.id + "x", "batch", 0)
    await allocate(store, machine.id, "web", 0)

    started_at = datetime.now(UTC)
    agent = await start_agent(**hook_settings(hook))
    await assign(store, machine, 0, attempt=1)
    waiting = await wait_message(store, 0, "waiting for host profile web (switching)")
    assert (waiting.attempt, waiting.machine, waiting.pid) == (1, machine.id, None)
    # The hook runs with the profile's settings, and nothing has started.
    [line] = await eventually(lambda: hook_runs(hook), bool, timeout_s=10, what="the hook to run")
    assert line.split("|") == [
        "web",
        json.dumps(WEB_SETTINGS, sort_keys=True),
        machine.id,
        "two words",
    ]
    assert WorkDir(work_dir).scan() == []
    assert await announced_profile(store, machine.id) is None

    released_at = datetime.now(UTC)
    (hook.parent / "gate").touch()
    running = await wait_status(store, 0, 1, TaskState.RUNNING)
    assert running.started_at is not None
    assert running.started_at >= released_at
    # The switch lasts at least the profile's switch_seconds, however quick the hook.
    assert (running.started_at - started_at).total_seconds() >= SWITCH_S
    announced = await eventually(
        lambda: read_heartbeat(store, machine.id),
        lambda seen: seen is not None and seen.machine.host_profile_current == "web",
        timeout_s=10,
        what="the heartbeat to announce profile web",
    )
    assert announced is not None
    assert announced.machine == machine.model_copy(update={"host_profile_current": "web"})
    # The broker copies it into the inventory.
    await eventually(
        lambda: read_machine(store, machine.id),
        lambda seen: seen is not None and seen.host_profile_current == "web",
        timeout_s=10,
        what="the machine record to show profile web",
    )
    current = read_record(CurrentProfile, WorkDir(work_dir).host_profile)
    assert current is not None
    assert current.name == "web"

    # A restarted agent carries the profile from the start and does not switch again.
    await stop(agent)
    second = await start_agent(**hook_settings(hook))
    assert await announced_profile(store, machine.id) == "web"
    await allocate(store, machine.id, "web", 1)
    await assign(store, machine, 1, attempt=1)
    await wait_status(store, 1, 1, TaskState.RUNNING)
    assert await hook_runs(hook) == [line]

    # No profile wanted any more (None): the machine keeps what it carries.
    await allocate(store, machine.id, None, 2)
    await assign(store, machine, 2, attempt=1)
    await wait_status(store, 2, 1, TaskState.RUNNING)
    assert await hook_runs(hook) == [line]
    assert second.machine.host_profile_current == "web"


async def test_a_failing_hook_keeps_tasks_waiting_and_is_retried(
    store: Store, start_agent: StartAgent, machine: Machine, hook: Path, work_dir: Path
) -> None:
    # No HostProfile record: no settings, and the agent's own switch duration.
    await allocate(store, machine.id, "batch", 0)
    (hook.parent / "fail").touch()
    (hook.parent / "gate").touch()
    await start_agent(**hook_settings(hook), profile_retry_s=0.1, profile_switch_s=0)
    await assign(store, machine, 0, attempt=1)
    failed = await wait_message(
        store,
        0,
        "waiting for host profile batch (switch failed: the hook exited with code 3: "
        "sysctl: cannot set vm.bogus; retrying)",
    )
    assert failed.pid is None
    # Retried: the hook ran again (with a doubling pause, at least twice within moments).
    runs = await eventually(
        lambda: hook_runs(hook), lambda runs: len(runs) >= 2, timeout_s=10, what="a retry"
    )
    assert runs[0].split("|")[:2] == ["batch", "{}"]
    assert WorkDir(work_dir).scan() == []
    assert await announced_profile(store, machine.id) is None

    # Once the hook succeeds, the task starts.
    (hook.parent / "fail").unlink()
    await wait_status(store, 0, 1, TaskState.RUNNING)
    await eventually(
        lambda: read_heartbeat(store, machine.id),
        lambda seen: seen is not None and seen.machine.host_profile_current == "batch",
        timeout_s=10,
        what="the heartbeat to announce profile batch",
    )
