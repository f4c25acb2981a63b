"""The keyspace: prefixes never overlap, and keys are built only from safe segments."""

from __future__ import annotations

import pytest

from tether.store import keys


def test_prefixes_are_distinct_and_none_begins_another() -> None:
    assert len(set(keys.ALL_PREFIXES)) == len(keys.ALL_PREFIXES)
    for prefix in keys.ALL_PREFIXES:
        assert prefix.startswith(keys.ROOT)
        assert prefix.endswith("/")
        for other in keys.ALL_PREFIXES:
            if other != prefix:
                assert not other.startswith(prefix), f"{other} lies under {prefix}"


def test_every_prefix_constant_is_listed() -> None:
    constants = {
        value
        for name, value in vars(keys).items()
        if name.isupper() and isinstance(value, str) and value != keys.ROOT
    }
    assert constants == set(keys.ALL_PREFIXES)


def test_keys_sit_under_their_prefix() -> None:
    assert keys.task("ads", "web", 3) == "/tether/v1/tasks/ads/web/3"
    assert keys.task("ads", "web", 3).startswith(keys.tasks_of("ads", "web"))
    assert keys.job("ads", "web").startswith(keys.jobs_of("ads"))
    # The prefix of job "web" must not contain the tasks of job "web-2".
    assert not keys.task("ads", "web-2", 0).startswith(keys.tasks_of("ads", "web"))
    assert keys.task_status("ads", "web", 3).startswith(keys.statuses_of_entitlement("ads"))
    assert not keys.task("ads-2", "web", 0).startswith(keys.tasks_of_entitlement("ads"))
    assert keys.last_segment(keys.machine("m-17")) == "m-17"


@pytest.mark.parametrize("segment", ["", "a/b"])
def test_unsafe_segments_are_refused(segment: str) -> None:
    with pytest.raises(ValueError, match="no '/'"):
        keys.machine(segment)
