"""`tether store ...`: look at the region's state directly, on either backend."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer

from tether.cli.common import err, out
from tether.cli.listing import Column, Output, OutputOption, print_table, records
from tether.store import Store, StoreError, keys, open_store

T = TypeVar("T")

app = typer.Typer(help="Inspect the store (TETHER_STORE, default: the embedded SQLite file).")

StoreUrl = typer.Option(
    None,
    "--store",
    envvar="TETHER_STORE",
    help="Store URL: sqlite:///path.db, postgresql://..., or etcd://host:port[,host:port].",
    show_default="sqlite:///.tether/store.db",
)


def _run(url: str | None, action: Callable[[Store], Awaitable[T]]) -> T:
    async def main() -> T:
        async with open_store(url) as store:
            return await action(store)

    try:
        return asyncio.run(main())
    except StoreError as exc:
        err().print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


@app.command()
def status(url: str | None = StoreUrl, output: Output = OutputOption) -> None:
    """The store's revision and how many keys each part of the keyspace holds."""

    async def read(store: Store) -> tuple[int, list[tuple[str, int]]]:
        counts = [(prefix, await store.count(prefix)) for prefix in keys.ALL_PREFIXES]
        return await store.revision(), counts

    revision, counts = _run(url, read)
    if records(output, {"revision": revision, "keys": dict(counts)}):
        return
    title = f"store revision {revision}"
    print_table(out(), counts, PREFIX_COLUMNS, output, title=title)


PREFIX_COLUMNS: list[Column[tuple[str, int]]] = [
    Column("prefix", lambda row: row[0], whole=True),
    Column("keys", lambda row: str(row[1]), justify="right"),
]


@app.command("ls")
def list_keys(
    prefix: str = typer.Argument(keys.ROOT, help="Key prefix to list."),
    limit: int = typer.Option(100, min=1, help="Show at most this many keys."),
    url: str | None = StoreUrl,
    output: Output = OutputOption,
) -> None:
    """List keys under a prefix with their revisions (JSON and YAML without the values; `tether
    store get` prints one)."""
    result = _run(url, lambda store: store.range(prefix, limit=limit))
    found = [
        {
            "key": kv.key,
            "create_revision": kv.create_revision,
            "mod_revision": kv.mod_revision,
            "version": kv.version,
            "lease": kv.lease,
            "bytes": len(kv.value),
        }
        for kv in result.kvs
    ]
    if records(output, {"revision": result.revision, "more": result.more, "keys": found}):
        return
    print_table(out(), found, KEY_COLUMNS, output, title=f"at revision {result.revision}")
    if result.more:
        out().print(f"(more keys; raise --limit above {limit})")


KEY_COLUMNS: list[Column[dict[str, Any]]] = [
    Column("key", lambda kv: kv["key"], whole=True),
    Column("mod rev", lambda kv: str(kv["mod_revision"]), justify="right"),
    Column("version", lambda kv: str(kv["version"]), give_way=2, justify="right"),
    Column("lease", lambda kv: f"{kv['lease']:x}", give_way=1),
    Column("bytes", lambda kv: str(kv["bytes"]), justify="right"),
    Column("create rev", lambda kv: str(kv["create_revision"]), wide_only=True),
]


@app.command()
def get(key: str = typer.Argument(..., help="The full key."), url: str | None = StoreUrl) -> None:
    """Print one key's value (pretty JSON when it is JSON)."""
    kv = _run(url, lambda store: store.get(key))
    if kv is None:
        err().print(f"[red]error:[/red] no key {key!r}")
        raise typer.Exit(1)
    try:
        out().print_json(json.dumps(json.loads(kv.value)))
    except ValueError:
        out().print(kv.value.decode(errors="replace"))
