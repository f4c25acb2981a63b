"""Choosing a backend by URL, and the errors a person sees for a bad one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.config import StoreSettings
from tether.store import StoreError, StoreMissing, open_store
from tether.store.base import prefix_end
from tether.store.etcd import EtcdStore, parse_endpoints
from tether.store.measured import MeasuredStore
from tether.store.sql import SqlStore


async def test_scheme_picks_the_backend(tmp_path: Path) -> None:
    sql = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    assert isinstance(sql, MeasuredStore)
    assert (type(sql.inner), sql.backend) == (SqlStore, "sqlite")
    await sql.close()
    etcd = open_store("etcd://127.0.0.1:2379")
    assert isinstance(etcd, MeasuredStore)
    assert (type(etcd.inner), etcd.backend) == (EtcdStore, "etcd")


def test_the_url_setting_comes_from_tether_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_STORE", "etcd://10.0.0.1:2379,10.0.0.2:2379")
    assert StoreSettings().url == "etcd://10.0.0.1:2379,10.0.0.2:2379"


def test_unknown_scheme_names_the_choices() -> None:
    with pytest.raises(StoreError, match=r"unknown store URL 'redis://x'.*sqlite:///.*etcd://"):
        open_store("redis://x")


def test_etcd_endpoints_are_parsed() -> None:
    assert parse_endpoints("etcd://a:1,b:2") == ([("a", 1), ("b", 2)], False)
    assert parse_endpoints("etcds://[::1]:2379") == ([("::1", 2379)], True)
    with pytest.raises(StoreError, match="must be host:port"):
        parse_endpoints("etcd://a:1,b")


def test_in_memory_sqlite_is_refused() -> None:
    with pytest.raises(StoreError, match="in-memory"):
        open_store("sqlite:///:memory:")


def test_prefix_end_is_the_first_key_after_the_prefix() -> None:
    assert prefix_end("/a/") == b"/a0"
    assert prefix_end("ab\xff") == b"ab\xc3\xc0"  # "\xff" is c3 bf in UTF-8
    assert prefix_end("") == b"\0"


async def test_without_create_a_missing_sqlite_file_is_refused_and_not_made(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state" / "store.db"
    with pytest.raises(StoreMissing, match=f"no SQLite store at {path}"):
        open_store(f"sqlite:///{path}", create=False)
    assert not path.parent.exists()
    # Once there, it opens as ever.
    await open_store(f"sqlite:///{path}").close()
    existing = open_store(f"sqlite:///{path}", create=False)
    assert isinstance(existing, MeasuredStore)
    await existing.close()
