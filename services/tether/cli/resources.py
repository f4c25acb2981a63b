"""`tether resource set|ls|rm`: an entitlement's ephemeral resources (ESCHER's set_resource)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from tether.cli.common import RegionDirOption, TokenOption, UrlOption, argument_parser, client, out
from tether.cli.listing import Column, Output, OutputOption, print_rows, records
from tether.sdk import MachineShareView, ResourceStateView

app = typer.Typer(
    help="Ephemeral resources: labels an entitlement sets on machines for its own tasks, which "
    "ask for them in resources.extra (docs/esl.md).",
    no_args_is_help=True,
)

EntitlementArgument = typer.Argument(..., help="The entitlement.", show_default=False)
LabelArgument = typer.Argument(..., help="The label.", show_default=False)
_OPERATORS = ("==", "!=", ">=", "<=")


@dataclass(frozen=True, slots=True)
class Predicate:
    """One `--constraint`, as a job's placement constraint."""

    attribute: str
    op: str
    value: str | None

    def as_json(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "op": self.op, "value": self.value}


def parse_constraint(text: str) -> Predicate:
    """`ATTRIBUTE==VALUE` (or !=, >=, <=), or `ATTRIBUTE` alone for "exists"."""
    for operator in _OPERATORS:
        attribute, found, value = text.partition(operator)
        if found:
            if not attribute or not value:
                raise ValueError(f"'{text}' is not ATTRIBUTE{operator}VALUE")
            return Predicate(attribute, operator, value)
    return Predicate(text, "exists", None)


@app.command("set")
def set_resource(
    entitlement: str = EntitlementArgument,
    label: str = LabelArgument,
    capacity: int = typer.Argument(..., help="How much each machine gets.", show_default=False),
    machine: str | None = typer.Option(None, help="Only this machine."),
    constraint: list[Predicate] | None = typer.Option(
        None,
        parser=argument_parser(parse_constraint),
        metavar="ATTRIBUTE==VALUE",
        help="Only machines meeting ATTRIBUTE==VALUE (or !=, >=, <=; ATTRIBUTE alone: it "
        "exists); repeatable. Neither this nor --machine: every machine.",
    ),
    owner_job: str | None = typer.Option(None, help="The label goes when this job does."),
    ttl_s: float | None = typer.Option(None, min=0.001, help="The label goes after this long."),
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Give the machines CAPACITY of the entitlement's LABEL (created if new). Refused when it
    would leave running tasks holding more than the new capacity."""
    node_spec: dict[str, Any] = {}
    if machine is not None:
        node_spec["machine"] = machine
    if constraint:
        node_spec["constraints"] = [predicate.as_json() for predicate in constraint]
    with client(url, token, region_dir) as tether:
        record = tether.set_resource(
            entitlement, label, capacity, node_spec, owner_job=owner_job, ttl_s=ttl_s
        )
    where = machine or ("machines meeting the constraints" if constraint else "every machine")
    out().print(f"{record.entitlement}/{record.label}: {capacity} on {where}")


@app.command("ls")
def list_resources(
    entitlement: str | None = typer.Option(None, help="Only this entitlement's labels."),
    label: str | None = typer.Option(None, help="Only this label."),
    machines: bool = typer.Option(False, "--machines", help="One row per machine."),
    output: Output = OutputOption,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """The cluster state: each label with its capacity, what running tasks hold and what is
    free, over its machines (or per machine, with --machines; JSON and YAML hold both)."""
    with client(url, token, region_dir) as tether:
        states = tether.get_cluster_state(entitlement, label=label)
    empty = "no ephemeral resources"
    if not machines:
        print_rows(states, LABEL_COLUMNS, output, empty=empty)
        return
    if records(output, states):
        return
    shares = [(state, share) for state in states for share in state.machines]
    print_rows(shares, MACHINE_SHARE_COLUMNS, output, empty=empty)


def _label(state: ResourceStateView) -> str:
    return f"{state.resource.entitlement}/{state.resource.label}"


def _ends(state: ResourceStateView) -> str:
    record = state.resource
    if record.owner_job:
        return f"with job {record.owner_job}"
    return f"at {record.expires_at:%Y-%m-%d %H:%M:%S}" if record.expires_at else "-"


def _total(state: ResourceStateView, amount: Callable[[MachineShareView], int]) -> str:
    return str(sum(amount(share) for share in state.machines))


LABEL_COLUMNS: list[Column[ResourceStateView]] = [
    Column("label", _label, whole=True),
    Column("machines", lambda s: f"{len(s.machines)}{'+' if s.machines_truncated else ''}"),
    Column("capacity", lambda state: _total(state, lambda share: share.capacity)),
    Column("held", lambda state: _total(state, lambda share: share.held)),
    Column("free", lambda state: _total(state, lambda share: share.free)),
    Column("ends", _ends, give_way=1),
]
MACHINE_SHARE_COLUMNS: list[Column[tuple[ResourceStateView, MachineShareView]]] = [
    Column("label", lambda pair: _label(pair[0]), whole=True),
    Column("machine", lambda pair: pair[1].machine, whole=True),
    Column("capacity", lambda pair: str(pair[1].capacity)),
    Column("held", lambda pair: str(pair[1].held)),
    Column("free", lambda pair: str(pair[1].free)),
]


@app.command("rm")
def remove(
    entitlement: str = EntitlementArgument,
    label: str = LabelArgument,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
    region_dir: Path | None = RegionDirOption,
) -> None:
    """Delete the label. Running tasks keep what they hold; no more are placed on it."""
    with client(url, token, region_dir) as tether:
        tether.delete_resource(entitlement, label)
    out().print(f"deleted {entitlement}/{label}")
