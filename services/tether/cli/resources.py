"""`tether resource set|ls|rm`: an entitlement's ephemeral resources (ESCHER's set_resource)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import typer
from rich.table import Table

from tether.cli.common import TokenOption, UrlOption, argument_parser, client, out
from tether.sdk import ResourceStateView

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
) -> None:
    """Give the machines CAPACITY of the entitlement's LABEL (created if new). Refused when it
    would leave running tasks holding more than the new capacity."""
    node_spec: dict[str, Any] = {}
    if machine is not None:
        node_spec["machine"] = machine
    if constraint:
        node_spec["constraints"] = [predicate.as_json() for predicate in constraint]
    with client(url, token) as tether:
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
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """The cluster state: each label with its capacity, what running tasks hold and what is
    free, over its machines (or per machine, with --machines)."""
    with client(url, token) as tether:
        states = tether.get_cluster_state(entitlement, label=label)
    if not states:
        out().print("no ephemeral resources")
        return
    out().print(_per_machine(states) if machines else _per_label(states))


def _per_label(states: list[ResourceStateView]) -> Table:
    table = Table("label", "machines", "capacity", "held", "free", "ends")
    for state in states:
        record = state.resource
        shares = state.machines
        ends = (
            f"with job {record.owner_job}"
            if record.owner_job
            else (f"at {record.expires_at:%Y-%m-%d %H:%M:%S}" if record.expires_at else "-")
        )
        table.add_row(
            f"{record.entitlement}/{record.label}",
            f"{len(shares)}{'+' if state.machines_truncated else ''}",
            str(sum(share.capacity for share in shares)),
            str(sum(share.held for share in shares)),
            str(sum(share.free for share in shares)),
            ends,
        )
    return table


def _per_machine(states: list[ResourceStateView]) -> Table:
    table = Table("label", "machine", "capacity", "held", "free")
    for state in states:
        for share in state.machines:
            table.add_row(
                f"{state.resource.entitlement}/{state.resource.label}",
                share.machine,
                str(share.capacity),
                str(share.held),
                str(share.free),
            )
    return table


@app.command("rm")
def remove(
    entitlement: str = EntitlementArgument,
    label: str = LabelArgument,
    url: str | None = UrlOption,
    token: str | None = TokenOption,
) -> None:
    """Delete the label. Running tasks keep what they hold; no more are placed on it."""
    with client(url, token) as tether:
        tether.delete_resource(entitlement, label)
    out().print(f"deleted {entitlement}/{label}")
