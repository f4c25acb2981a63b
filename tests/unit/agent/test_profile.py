"""Host profile switching on the agent: when a switch is due, what waiting tasks say, the retry
pause, the hook's settings and how a hook run succeeds, fails or times out."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import cast

import pydantic
import pytest

from tests.support.waiting import eventually
from tether.agent.procfs import start_ticks
from tether.agent.profile import (
    RETRY_MAX_S,
    HostProfiles,
    SwitchFailed,
    hook_environment,
    retry_delay,
    run_hook,
    waiting_message,
    wanted_profile,
)
from tether.agent.settings import AgentSettings
from tether.model import Allocation, to_json
from tether.store import KeyValue, Store, keys


@pytest.mark.parametrize(
    ("target", "current", "wanted"),
    [
        ("web", None, "web"),
        ("web", "batch", "web"),
        ("web", "web", None),
        (None, "batch", None),  # None keeps whatever the machine carries
        (None, None, None),
    ],
)
def test_a_switch_is_due_only_to_a_new_target(
    target: str | None, current: str | None, wanted: str | None
) -> None:
    assert wanted_profile(target, current) == wanted


def test_waiting_tasks_say_what_they_wait_for() -> None:
    assert waiting_message("web", None) == "waiting for host profile web (switching)"
    assert waiting_message("web", "the hook exited with code 3") == (
        "waiting for host profile web (switch failed: the hook exited with code 3; retrying)"
    )


def test_the_retry_pause_doubles_up_to_a_cap() -> None:
    assert [retry_delay(n, 0.5) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert retry_delay(30, 0.5) == RETRY_MAX_S


def test_the_hook_comes_from_the_environment_split_without_a_shell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TETHER_AGENT_PROFILE_HOOK", "/usr/local/bin/switch --mode 'a b' $HOME")
    monkeypatch.setenv("TETHER_AGENT_PROFILE_SWITCH_S", "2.5")
    settings = AgentSettings()
    assert settings.profile_hook_argv == ["/usr/local/bin/switch", "--mode", "a b", "$HOME"]
    assert settings.profile_switch_s == 2.5
    assert AgentSettings(profile_hook="").profile_hook_argv == []


def test_an_unsplittable_hook_is_a_settings_error() -> None:
    with pytest.raises(pydantic.ValidationError, match="profile_hook"):
        AgentSettings(profile_hook="switch 'unclosed")


def test_the_hook_environment_names_the_profile_and_its_settings() -> None:
    env = hook_environment("web", {"vm.swappiness": "10", "a": "b"}, "m1")
    assert env["TETHER_HOST_PROFILE"] == "web"
    assert json.loads(env["TETHER_HOST_PROFILE_SETTINGS"]) == {"vm.swappiness": "10", "a": "b"}
    assert env["TETHER_MACHINE"] == "m1"
    assert "PATH" in env  # the agent's own environment is passed on


async def test_a_hook_that_exits_zero_completes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = hook_environment("web", {"k": "v"}, "m1")
    await run_hook(["sh", "-c", f'echo "$TETHER_HOST_PROFILE $1" > {out}', "hook", "arg"], env, 5)
    assert out.read_text() == "web arg\n"


async def test_a_failing_hook_is_reported_with_its_last_line() -> None:
    with pytest.raises(SwitchFailed, match=r"^the hook exited with code 4: second$"):
        await run_hook(["sh", "-c", "echo first; echo second >&2; exit 4"], {}, 5)


async def test_a_missing_hook_is_reported() -> None:
    with pytest.raises(SwitchFailed, match="cannot run the hook '/nonexistent/hook'"):
        await run_hook(["/nonexistent/hook"], {}, 5)


async def test_a_hook_that_overruns_is_killed_with_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    started = time.monotonic()
    with pytest.raises(SwitchFailed, match=r"did not finish within 0.5 s"):
        await run_hook(["sh", "-c", script], {"PATH": "/usr/bin:/bin"}, 0.5)
    assert time.monotonic() - started < 5
    child = int(pid_file.read_text())

    async def ticks() -> int | None:
        return start_ticks(child)

    await eventually(ticks, lambda found: found is None, timeout_s=5, what="the hook's child gone")


def allocation_kv(machine_id: str, profile: str | None, mod_revision: int) -> KeyValue:
    value = to_json(Allocation(machine=machine_id, entitlement="ent", host_profile=profile))
    return KeyValue(keys.allocation(machine_id), value, 1, mod_revision, 1)


async def test_the_target_follows_the_newest_allocation_record(tmp_path: Path) -> None:
    async def switched(profile: str) -> None:
        raise AssertionError("no switch runs here")

    # Deciding the target reads nothing from the store.
    profiles = HostProfiles(
        cast(Store, object()), "m1", AgentSettings(), tmp_path / "profile.json", switched
    )

    def after(kv: KeyValue | None) -> tuple[str | None, str | None]:
        """(target, wanted) once `kv` has been seen."""
        profiles._take(kv)
        return profiles.target, profiles.wanted

    assert after(allocation_kv("m1", "web", 5)) == ("web", "web")
    # An older copy (the watch behind a direct read) does not undo a newer one.
    assert after(allocation_kv("m1", "batch", 4)) == ("web", "web")
    # A malformed record is ignored.
    assert after(KeyValue(keys.allocation("m1"), b"{not json", 1, 6, 2)) == ("web", "web")
    # The machine's allocation entries share the record's key as a prefix: they are not it.
    await profiles._allocation_changed({keys.allocation_entry("m1", "ent", "job", 0)})
    assert (profiles.target, profiles.wanted) == ("web", "web")
    assert after(allocation_kv("m1", None, 7)) == (None, None)
    profiles.current = "batch"
    assert after(allocation_kv("m1", "batch", 8)) == ("batch", None)
    assert after(allocation_kv("m1", "web", 9)) == ("web", "web")
    # No record at all asks for nothing.
    assert after(None) == (None, None)
