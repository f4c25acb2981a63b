"""`tether rebalance`: ask the rebalancer for a plan or for moves, and look at its runs (admin)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import typer
from rich import box
from rich.table import Table

from tether.cli.common import RegionDirOption, TokenOption, UrlOption, client, err, fail, out, poll
from tether.cli.listing import Column, Output, OutputOption, print_rows, print_table, records
from tether.model.rebalance import STRATEGY_NAMES
from tether.sdk import RebalanceMoveView, RebalanceRunView, TetherClient

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
MOVE_COLUMNS: list[Column[RebalanceMoveView]] = [
    Column("job", lambda move: move.job, whole=True),
    Column("task", lambda move: str(move.index), justify="right"),
    Column("from", lambda move: move.source, whole=True),
    Column("to", lambda move: move.target, whole=True),
    Column("strategy", lambda move: move.strategy, give_way=2),
    Column("why", lambda move: move.why, give_way=1),
]


@app.command("plan")
def plan(
    strategy: list[str] | None = StrategyOption,
    timeout_s: float = TimeoutOption,
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Show what the rebalancer would move now, where, why, and each strategy's expected gain
    (a dry run: nothing moves)."""
    with client(url, token, region_dir) as tether:
        _print(_ask(tether, True, strategy or [], timeout_s), output)


@app.command("run")
def run(
    strategy: list[str] | None = StrategyOption,
    timeout_s: float = TimeoutOption,
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Propose the moves of one round as MOVE operations: each job's TaskController (or the
    built-in rule) approves them when it can spare the task. (`tether rebalancer --continuous`
    makes a round every period on its own.)"""
    with client(url, token, region_dir) as tether:
        _print(_ask(tether, False, strategy or [], timeout_s), output)


@app.command("show")
def show(
    run_id: str = RunArgument,
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Show one run: its moves and the measures before and after."""
    with client(url, token, region_dir) as tether:
        _print(tether.get_rebalance(run_id), output)


RUN_COLUMNS: list[Column[RebalanceRunView]] = [
    Column("id", lambda found: found.id, whole=True),
    Column("created", lambda found: f"{found.created_at:%Y-%m-%d %H:%M:%S}"),
    Column("by", lambda found: found.requested_by, give_way=1),
    Column("kind", lambda found: "plan" if found.dry_run else "run"),
    Column("state", lambda found: found.state),
    Column("moves", lambda found: str(len(found.moves)), justify="right"),
    Column("strategies", lambda found: ", ".join(found.strategies) or "all", wide_only=True),
    Column("message", lambda found: found.message or "-", wide_only=True),
]


@app.command("ls")
def list_runs(
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """List the runs kept, newest first."""
    with client(url, token, region_dir) as tether:
        runs = tether.list_rebalances()
    print_rows(runs, RUN_COLUMNS, output, empty="no rebalance runs kept")


def _ask(
    tether: TetherClient, dry_run: bool, strategies: list[str], timeout_s: float
) -> RebalanceRunView:
    asked = tether.ask_rebalance(dry_run=dry_run, strategies=strategies)
    with err().status(f"run {asked.id}: asked the rebalancer; waiting for its answer"):
        return _answer(tether, asked.id, timeout_s)


def _answer(tether: TetherClient, run_id: str, timeout_s: float) -> RebalanceRunView:
    for _ in poll(WAIT_POLL_S, timeout_s):
        current = tether.get_rebalance(run_id)
        if current.state != "pending":
            return current
    fail(
        f"run {run_id}: the rebalancer did not answer within {timeout_s:g} s; see "
        f"`tether rebalance show {run_id}` later"
    )


def _print(run: RebalanceRunView, output: Output) -> None:
    if records(output, run):
        return
    if run.state == "failed":
        fail(f"run {run.id} failed: {run.message}")
    if run.state == "pending":
        out().print(f"run {run.id}: pending")
        return
    verb = "would move" if run.dry_run else "moves"
    out().print(f"run {run.id}: {verb} {len(run.moves)} tasks")
    if run.moves:
        not_proposed = "-" if run.dry_run else "[yellow]not proposed[/yellow]"
        operation: Column[RebalanceMoveView] = Column(
            "operation", lambda m: m.operation or not_proposed, markup=True
        )
        columns = [*MOVE_COLUMNS, operation]
        print_table(out(), run.moves, columns, output)
    gains = Table("strategy", "before", "after", "expected gain", box=box.SIMPLE_HEAD)
    for name, before in run.before.items():
        gains.add_row(name, f"{before:.3g}", f"{run.after[name]:.3g}", f"{run.gains[name]:.3g}")
    out().print(gains)
    if run.deferred:
        deferred = ", ".join(f"{reason} {count}" for reason, count in sorted(run.deferred.items()))
        out().print(f"not moved: {deferred}")
