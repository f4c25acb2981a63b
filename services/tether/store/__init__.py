"""The region's state: one async store protocol with an etcd and a SQL backend."""

from __future__ import annotations

from tether.config import StoreSettings
from tether.store.base import (
    CompactedError,
    Compare,
    CompareOp,
    CompareTarget,
    Delete,
    DeleteResult,
    EventType,
    Get,
    KeyValue,
    LeaseNotFound,
    Op,
    OpResult,
    Put,
    PutResult,
    RangeResult,
    Store,
    StoreError,
    StoreMissing,
    StoreUnavailable,
    TxnResult,
    Watch,
    WatchEvent,
    key_exists,
    key_missing,
    mod_revision_is,
    value_is,
)
from tether.store.measured import MeasuredStore

__all__ = [
    "CompactedError",
    "Compare",
    "CompareOp",
    "CompareTarget",
    "Delete",
    "DeleteResult",
    "EventType",
    "Get",
    "KeyValue",
    "LeaseNotFound",
    "Op",
    "OpResult",
    "Put",
    "PutResult",
    "RangeResult",
    "Store",
    "StoreError",
    "StoreMissing",
    "StoreUnavailable",
    "TxnResult",
    "Watch",
    "WatchEvent",
    "key_exists",
    "key_missing",
    "mod_revision_is",
    "open_store",
    "value_is",
]

SQL_SCHEMES = ("sqlite", "postgresql")
ETCD_SCHEMES = ("etcd", "etcds")


def open_store(
    url: str | None = None, settings: StoreSettings | None = None, *, create: bool = True
) -> Store:
    """The store behind `url` (default: TETHER_STORE), chosen by its scheme, with its requests
    timed for the `tether_store_*` metrics. Without `create`, a SQLite file that does not exist
    is StoreMissing rather than a new, empty store."""
    settings = settings or StoreSettings()
    url = url or settings.url
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower()
    # The backends are imported on use: a process loads the one client library it needs.
    if scheme in ETCD_SCHEMES:
        from tether.store.etcd import EtcdStore

        return MeasuredStore(EtcdStore(url, settings), "etcd")
    if scheme in SQL_SCHEMES:
        from tether.store.sql import SqlStore

        return MeasuredStore(SqlStore(url, settings, create=create), scheme)
    raise StoreError(
        f"unknown store URL {url!r}: use sqlite:///path/region.db, postgresql://..., "
        "or etcd://host:port[,host:port...]"
    )
