"""`tether region init`: create a region's first records in its store, for a region whose
services an operator runs (systemd, Kubernetes) rather than `tether up`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

from tether.cli.common import fail, out
from tether.model import DEFAULT_FENCING_S, Entitlement
from tether.region.bootstrap import ADMIN_PRINCIPAL, bootstrap_region
from tether.region.plan import DEFAULT_ENTITLEMENT, shard_ids
from tether.store import StoreError, open_store

app = typer.Typer(help="Create a region in its store (services refuse a store without one).")


@app.command("init")
def init(
    store: str = typer.Option(
        ..., "--store", envvar="TETHER_STORE", help="The region's store URL.", show_default=False
    ),
    name: str = typer.Option("region", "--name", help="The region's name."),
    shards: int = typer.Option(2, "--shards", min=1, max=64, help="Scheduler shards: shard-0, ..."),
    admin_token_file: Path = typer.Option(
        ...,
        "--admin-token-file",
        dir_okay=False,
        help="The admin's token: read from this file, or made and written there (mode 0600).",
        show_default=False,
    ),
    fencing_s: float = typer.Option(
        DEFAULT_FENCING_S,
        "--fencing-s",
        min=1,
        help="At-most-once tasks: how long a lost machine's tasks wait before they run again.",
    ),
) -> None:
    """Create the region: its config (name, shards, fencing period), the admin principal and an
    empty `default` entitlement of the admin's. Run it once, before the services start; run
    again, it changes nothing but the admin's token (a resumed region keeps its config)."""
    default = Entitlement(name=DEFAULT_ENTITLEMENT, members=[ADMIN_PRINCIPAL])

    async def create() -> bool:
        async with open_store(store) as opened:
            result = await bootstrap_region(
                opened,
                name=name,
                shards=list(shard_ids(shards)),
                admin_token_file=admin_token_file,
                default_entitlement=default,
                fencing_s=fencing_s,
            )
        return result.created

    try:
        created = asyncio.run(create())
    except (StoreError, OSError) as error:
        fail(f"cannot create the region in {store}: {error}")
    what = "created" if created else "already exists; kept its config"
    out().print(f"region {name} {what}; the admin's token is in {admin_token_file}")
