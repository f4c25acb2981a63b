"""Allocator settings come from TETHER_ALLOCATOR_* with the documented defaults."""

from __future__ import annotations

import os

import pydantic
import pytest

from tether.allocator.settings import AllocatorSettings


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOST", "PORT", "ID", "LEASE_TTL_S", "MAX_ATTEMPTS"):
        monkeypatch.delenv(f"TETHER_ALLOCATOR_{name}", raising=False)
    settings = AllocatorSettings()
    assert (settings.host, settings.port, settings.lease_ttl_s, settings.max_attempts) == (
        "127.0.0.1",
        0,
        15,
        10,
    )
    assert settings.id == f"allocator-{os.getpid()}"


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_ALLOCATOR_PORT", "7070")
    monkeypatch.setenv("TETHER_ALLOCATOR_ID", "allocator-7")
    monkeypatch.setenv("TETHER_ALLOCATOR_MAX_ATTEMPTS", "3")
    settings = AllocatorSettings()
    assert (settings.port, settings.id, settings.max_attempts) == (7070, "allocator-7", 3)


def test_an_id_must_be_a_key_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_ALLOCATOR_ID", "a/b")
    with pytest.raises(pydantic.ValidationError):
        AllocatorSettings()
