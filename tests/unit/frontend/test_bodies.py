"""Request bodies: JSON and YAML job specs, their digests, and the Idempotency-Key header."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tether.frontend.bodies import check_idempotency_key, is_yaml, parse_model, spec_sha256
from tether.frontend.problems import BadRequest, InvalidInput
from tether.model import Entitlement, JobKind, JobSpec

SPEC: dict[str, Any] = {
    "name": "web",
    "entitlement": "team-a",
    "count": 2,
    "task": {
        "package": "hello",
        "version": "1.0",
        "command": "python",
        "args": ["-m", "http.server"],
        "resources": {"cpu": 500, "memory_mib": 256},
    },
}

SPEC_YAML = b"""\
name: web
entitlement: team-a
count: 2
task:
  package: hello
  version: "1.0"
  command: python
  args: ["-m", "http.server"]
  resources: {cpu: 500, memory_mib: 256}
"""


def test_json_and_yaml_give_the_same_spec_and_digest() -> None:
    from_json = parse_model(JobSpec, json.dumps(SPEC).encode(), "application/json")
    from_yaml = parse_model(JobSpec, SPEC_YAML, "application/yaml; charset=utf-8")
    assert from_json == from_yaml
    assert spec_sha256(from_json) == spec_sha256(from_yaml)
    assert from_yaml.task.resources.cpu == 500


def test_spec_digest_changes_with_the_spec() -> None:
    one = parse_model(JobSpec, json.dumps(SPEC).encode(), None)
    three = parse_model(JobSpec, json.dumps(SPEC | {"count": 3}).encode(), None)
    assert len(spec_sha256(one)) == 64
    assert spec_sha256(one) != spec_sha256(three)


@pytest.mark.parametrize(
    ("content_type", "yaml"),
    [
        ("application/yaml", True),
        ("application/x-yaml", True),
        ("Text/YAML; charset=utf-8", True),
        ("application/json", False),
        (None, False),
        ("text/plain", False),
    ],
)
def test_yaml_is_chosen_by_content_type(content_type: str | None, yaml: bool) -> None:
    assert is_yaml(content_type) is yaml


def test_yaml_timestamps_validate_like_json_strings() -> None:
    text = SPEC_YAML + b"kind: batch\ndeadline: 2030-01-02T03:04:05Z\n"
    spec = parse_model(JobSpec, text, "text/yaml")
    assert spec.kind is JobKind.BATCH
    assert spec.deadline == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        b"name: [unclosed",
        b"a: &x [1]\nb: *x\n",  # aliases can expand exponentially; refused
        b"blob: !!binary aGVsbG8=\n",  # bytes have no JSON form
        b"n: .nan\n",
        b"!!python/object:os.system {}\n",  # unsafe tags are refused by the safe loader
    ],
)
def test_unusable_yaml_is_a_bad_request(text: bytes) -> None:
    with pytest.raises(BadRequest, match="not usable YAML"):
        parse_model(JobSpec, text, "application/yaml")


@pytest.mark.parametrize("text", [b"", b"{", b"\xff\xfe", b'{"name": "web",}'])
def test_unparsable_json_is_a_bad_request(text: bytes) -> None:
    with pytest.raises(BadRequest, match="not valid JSON"):
        parse_model(JobSpec, text, "application/json")


def test_an_invalid_spec_names_every_bad_field() -> None:
    bad = SPEC | {"count": 0, "task": SPEC["task"] | {"resources": {"cpu": -1}}}
    with pytest.raises(InvalidInput) as caught:
        parse_model(JobSpec, json.dumps(bad).encode(), None)
    assert caught.value.errors is not None
    locs = {tuple(error.loc) for error in caught.value.errors}
    assert locs == {("count",), ("task", "resources", "cpu")}
    assert "task.resources.cpu" in caught.value.detail


def test_strict_models_take_enum_strings_in_json_mode_only() -> None:
    # The reason bodies are validated from JSON text: python-mode strict would refuse "batch".
    spec = parse_model(JobSpec, json.dumps(SPEC | {"kind": "batch"}).encode(), None)
    assert spec.kind is JobKind.BATCH


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_model(Entitlement, b'{"name": "t", "owner": "x"}', None)
    assert caught.value.errors is not None
    assert [error.loc for error in caught.value.errors] == [["owner"]]


@pytest.mark.parametrize("key", ["a", "retry-1.ok_2", "A" * 128, "0f8fad5b-d9cb-469f"])
def test_valid_idempotency_keys(key: str) -> None:
    assert check_idempotency_key(key) == key


def test_no_idempotency_key_is_fine() -> None:
    assert check_idempotency_key(None) is None


@pytest.mark.parametrize("key", ["", "A" * 129, "a/b", "a b", "ключ", "a:b"])
def test_invalid_idempotency_keys(key: str) -> None:
    with pytest.raises(BadRequest, match="Idempotency-Key"):
        check_idempotency_key(key)
