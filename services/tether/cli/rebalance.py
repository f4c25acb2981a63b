"""`tether rebalance`: ask the rebalancer for a plan or for moves, and look at its runs (admin)."""

from __future__ import annotations

from typing import Final

import typer
from rich import box
from rich.table import Table

from tether.cli.common import TokenOption, UrlOption, client, fail, out, poll
from tether.model.rebalance import STRATEGY_NAMES
from tether.sdk import RebalanceRunView, TetherClient

app = typer.Typer(
    help="Ask the rebalancer for a plan (dry run) or for moves, and look at its runs (admin).",
    no_args_is_help=True,
)

WAIT_POLL_S: Final = 0.25


def _known(strategies: list[str] | None) -> list[str] | None:
    unknown = [name for name in strategies or [] if name not in STRATEGY_NAMES]
    if unknown:
        raise typer.BadParameter(
            f"unknown strategy {unknown[0]!r}: choose from {', '.join(STRATEGY_NAMES)}"
        )
    return strategies


StrategyOption = typer.Option(
    None,
    "--strategy",
    "-s",
    callback=_known,
    help=f"A strategy to use (repeat for several): {', '.join(STRATEGY_NAMES)}. Default: "
    "the rebalancer's own list (all).",
    show_default=False,
)
TimeoutOption = typer.Option(
    60.0, "--timeout-s", min=0, help="How long to wait for the rebalancer's leader to answer."
)
RunArgument = typer.Argument(..., help="The run's id.", show_default=False)


@app.command("plan")
def plan(
    strategy: list[str] | None = StrategyOption,
    timeout_s: float = TimeoutOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Show what the rebalancer would move now, where, why, and each strategy's expected gain
    (a dry run: nothing moves)."""
    _ask(dry_run=True, strategies=strategy or [], timeout_s=timeout_s, url=url, token=token)


@app.command("run")
def run(
    strategy: list[str] | None = StrategyOption,
    timeout_s: float = TimeoutOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Propose the moves of one round as MOVE operations: each job's TaskController (or the
    built-in rule) approves them when it can spare the task. (`tether rebalancer --continuous`
    makes a round every period on its own.)"""
    _ask(dry_run=False, strategies=strategy or [], timeout_s=timeout_s, url=url, token=token)


@app.command("show")
def show(
    run_id: str = RunArgument, url: str | None = UrlOption, token: str | None = TokenOption
) -> None:
    """Show one run: its moves and the measures before and after."""
    with client(url, token) as tether:
        _print(tether.get_rebalance(run_id))


@app.command("ls")
def list_runs(url: str | None = UrlOption, token: str | None = TokenOption) -> None:
    """List the runs kept, newest first."""
    with client(url, token) as tether:
        runs = tether.list_rebalances()
    table = Table("id", "created", "by", "kind", "state", "moves", box=box.SIMPLE_HEAD)
    for found in runs:
        table.add_row(
            found.id,
            f"{found.created_at:%Y-%m-%d %H:%M:%S}",
            found.requested_by,
            "plan" if found.dry_run else "run",
            found.state,
            str(len(found.moves)),
        )
    out().print(table)


def _ask(
    *, dry_run: bool, strategies: list[str], timeout_s: float, url: str | None, token: str | None
) -> None:
    with client(url, token) as tether:
        asked = tether.ask_rebalance(dry_run=dry_run, strategies=strategies)
        out().print(f"run {asked.id}: asked the rebalancer; waiting for its answer")
        _print(_answer(tether, asked.id, timeout_s))


def _answer(tether: TetherClient, run_id: str, timeout_s: float) -> RebalanceRunView:
    for _ in poll(WAIT_POLL_S, timeout_s):
        current = tether.get_rebalance(run_id)
        if current.state != "pending":
            return current
    fail(
        f"run {run_id}: the rebalancer did not answer within {timeout_s:g} s; see "
        f"`tether rebalance show {run_id}` later"
    )


def _print(run: RebalanceRunView) -> None:
    if run.state == "failed":
        fail(f"run {run.id} failed: {run.message}")
    if run.state == "pending":
        out().print(f"run {run.id}: pending")
        return
    moves = Table("job", "task", "from", "to", "strategy", "why", "operation", box=box.SIMPLE_HEAD)
    for move in run.moves:
        moves.add_row(
            move.job,
            str(move.index),
            move.source,
            move.target,
            move.strategy,
            move.why,
            move.operation or ("-" if run.dry_run else "[yellow]not proposed[/yellow]"),
        )
    verb = "would move" if run.dry_run else "moves"
    out().print(f"run {run.id}: {verb} {len(run.moves)} tasks")
    if run.moves:
        out().print(moves)
    gains = Table("strategy", "before", "after", "expected gain", box=box.SIMPLE_HEAD)
    for name, before in run.before.items():
        gains.add_row(name, f"{before:.3g}", f"{run.after[name]:.3g}", f"{run.gains[name]:.3g}")
    out().print(gains)
    if run.deferred:
        deferred = ", ".join(f"{reason} {count}" for reason, count in sorted(run.deferred.items()))
        out().print(f"not moved: {deferred}")
