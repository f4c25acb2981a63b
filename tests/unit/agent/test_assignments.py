"""Reading assignment keys: the task a key names, and one template per job generation."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tether.agent import assignments
from tether.agent.assignments import SharedTemplates, assignment_at
from tether.model import Assignment
from tether.store import KeyValue, keys

TEMPLATE: dict[str, Any] = {
    "package": "sleeper",
    "version": "1",
    "command": "/bin/sleep",
    "args": ["3600"],
    "resources": {"cpu": 100, "memory_mib": 64},
}


def stored(index: int, generation: int = 1, **template: Any) -> KeyValue:
    value = {
        "job": "team/web",
        "index": index,
        "attempt": 1,
        "generation": generation,
        "template": TEMPLATE | template,
    }
    key = keys.assignment("m1", "team", "web", index)
    return KeyValue(key, orjson.dumps(value), 1, 1, 1, 0)


def read(kv: KeyValue, templates: SharedTemplates) -> Assignment:
    found = assignment_at("m1", kv.key, kv, templates)
    assert found is not None
    return found[1]


def test_the_tasks_of_a_job_generation_share_one_template() -> None:
    templates = SharedTemplates()
    first, second = read(stored(0), templates), read(stored(1), templates)
    assert (first.index, second.index) == (0, 1)
    assert second.template is first.template


def test_a_different_template_is_never_replaced_by_a_known_one() -> None:
    templates = SharedTemplates()
    first = read(stored(0), templates)
    # The same generation with another template (a record written by hand): kept as read.
    changed = read(stored(1, args=["60"]), templates)
    assert changed.template.args == ["60"]
    assert read(stored(2, args=["60"]), templates).template is changed.template
    newer = read(stored(3, generation=2), templates)
    assert newer.template == first.template
    assert newer.template is not first.template


def test_only_the_latest_generations_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assignments, "TEMPLATES_KEPT", 2)
    templates = SharedTemplates()
    first = read(stored(0, generation=1), templates)
    read(stored(0, generation=2), templates)
    read(stored(0, generation=3), templates)  # generation 1 is forgotten
    assert read(stored(1, generation=1), templates).template is not first.template
