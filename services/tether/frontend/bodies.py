"""Request bodies: JSON or YAML into strict models, size limits, and the Idempotency-Key header."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from typing import Any, Final, TypeVar

import yaml
from fastapi import Request
from pydantic import ValidationError

from tether.frontend.problems import BadRequest, PayloadTooLarge, validation_problem
from tether.model import JobSpec, TetherModel, from_json, to_json

M = TypeVar("M", bound=TetherModel)

YAML_TYPES: Final = frozenset({"application/yaml", "application/x-yaml", "text/yaml"})
IDEMPOTENCY_KEY_RULE: Final = "at most 128 characters of A-Z, a-z, 0-9, '.', '_' and '-'"
IDEMPOTENCY_KEY_PATTERN: Final = r"^[A-Za-z0-9._-]{1,128}$"
_IDEMPOTENCY_KEY: Final = re.compile(IDEMPOTENCY_KEY_PATTERN)


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load without anchors and aliases: a few aliased lines can otherwise expand into
    gigabytes of JSON ("billion laughs"), and job specs never need them."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not allowed")
        return super().compose_node(parent, index)


def _json_default(value: object) -> str:
    # YAML reads unquoted timestamps as datetimes; as ISO strings they validate like JSON's.
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError(f"a YAML value of type {type(value).__name__} has no JSON form")


def is_yaml(content_type: str | None) -> bool:
    """Whether a Content-Type header names YAML (parameters such as charset are ignored)."""
    return (content_type or "").split(";", 1)[0].strip().lower() in YAML_TYPES


def yaml_to_json(body: bytes) -> str:
    """The JSON text of a YAML document; 400 when it is not YAML or has no JSON form."""
    try:
        data: Any = yaml.load(body, Loader=_NoAliasLoader)
        return json.dumps(data, default=_json_default, allow_nan=False)
    except (yaml.YAMLError, TypeError, ValueError) as exc:
        raise BadRequest(f"the request body is not usable YAML: {exc}") from None


def parse_model(cls: type[M], body: bytes, content_type: str | None) -> M:
    """Validate a JSON body (or YAML, by Content-Type) as `cls`: 400 if unparsable, 422 with
    every invalid field if it does not validate."""
    text: bytes | str = yaml_to_json(body) if is_yaml(content_type) else body
    try:
        return from_json(cls, text)
    except ValidationError as exc:
        errors = exc.errors()
    # JSON Schema's integers include 3.0, which strict models refuse. A second try, with such
    # numbers written as integers, accepts them without slowing down any other body.
    whole = _whole_numbers(text)
    if whole is not None:
        try:
            return from_json(cls, whole)
        except ValidationError as exc:
            errors = exc.errors()
    hint = "send YAML with Content-Type: application/yaml"
    raise validation_problem(errors, unparsable_hint=hint) from None


def _whole_numbers(text: bytes | str) -> str | None:
    """The JSON `text` with every number whose fraction is zero (3.0, 1e3) as an integer; None
    if it has none, or is not JSON."""
    changed = False

    def number(literal: str) -> int | float:
        nonlocal changed
        value = float(literal)
        if not value.is_integer():
            return value
        changed = True
        return int(value)

    def constant(name: str) -> float:
        raise ValueError(f"{name} is not JSON")

    try:
        data = json.loads(text, parse_float=number, parse_constant=constant)
    except (ValueError, RecursionError):
        return None
    return json.dumps(data) if changed else None


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 past `limit` bytes without reading it all."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the request body is {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def check_idempotency_key(key: str | None) -> str | None:
    """The Idempotency-Key header's value if valid (None when absent); 400 otherwise."""
    if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
        raise BadRequest(f"the Idempotency-Key header must be {IDEMPOTENCY_KEY_RULE}")
    return key


def spec_sha256(spec: JobSpec) -> str:
    """The hex SHA-256 of a spec's canonical JSON (every field, defaults filled in), so the same
    job sent as JSON or as YAML has the same digest."""
    return hashlib.sha256(to_json(spec)).hexdigest()
