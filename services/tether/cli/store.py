"""`tether store ...`: look at the region's state directly, on either backend."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tether.store import Store, StoreError, keys, open_store

T = TypeVar("T")

app = typer.Typer(help="Inspect the store (TETHER_STORE, default: the embedded SQLite file).")
console = Console()
errors = Console(stderr=True)

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
        errors.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


@app.command()
def status(url: str | None = StoreUrl) -> None:
    """The store's revision and how many keys each part of the keyspace holds."""

    async def read(store: Store) -> tuple[int, list[tuple[str, int]]]:
        counts = [(prefix, await store.count(prefix)) for prefix in keys.ALL_PREFIXES]
        return await store.revision(), counts

    revision, counts = _run(url, read)
    table = Table("prefix", "keys", title=f"store revision {revision}")
    for prefix, count in counts:
        table.add_row(prefix, str(count))
    console.print(table)


@app.command("ls")
def list_keys(
    prefix: str = typer.Argument(keys.ROOT, help="Key prefix to list."),
    limit: int = typer.Option(100, min=1, help="Show at most this many keys."),
    url: str | None = StoreUrl,
) -> None:
    """List keys under a prefix with their revisions."""
    result = _run(url, lambda store: store.range(prefix, limit=limit))
    table = Table(
        "key", "mod rev", "version", "lease", "bytes", title=f"at revision {result.revision}"
    )
    for kv in result.kvs:
        table.add_row(
            kv.key, str(kv.mod_revision), str(kv.version), f"{kv.lease:x}", str(len(kv.value))
        )
    console.print(table)
    if result.more:
        console.print(f"(more keys; raise --limit above {limit})")


@app.command()
def get(key: str = typer.Argument(..., help="The full key."), url: str | None = StoreUrl) -> None:
    """Print one key's value (pretty JSON when it is JSON)."""
    kv = _run(url, lambda store: store.get(key))
    if kv is None:
        errors.print(f"[red]error:[/red] no key {key!r}")
        raise typer.Exit(1)
    try:
        console.print_json(json.dumps(json.loads(kv.value)))
    except ValueError:
        console.print(kv.value.decode(errors="replace"))
