"""The service commands (`tether frontend`, `tether agent`, ...), and a way to run one without
importing the others: `python -m tether.cli.services <command> [options]`.

`tether up` starts every process of a region that way. Importing the whole CLI costs each
process about 2.7 s of CPU, one service's command 0.7 to 1.7 s; a region of 14 processes on two
cores starts about 10 s sooner.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any, Final

import typer

SERVICE_COMMANDS: Final = {
    "agent": "tether.cli.agent:agent",
    "agent-sim": "tether.cli.agent_sim:agent_sim",
    "allocator": "tether.cli.allocator:allocator",
    "broker": "tether.cli.broker:broker",
    "frontend": "tether.cli.frontend:frontend",
    "health": "tether.cli.health:health",
    "rebalancer": "tether.cli.rebalancer:rebalancer",
    "registry": "tether.cli.registry:registry",
    "scheduler": "tether.cli.scheduler:scheduler",
}
"""Each service command's function, as `module:function`."""


def command(name: str) -> Callable[..., Any]:
    """The function of service command `name` (importing its module only)."""
    module, function = SERVICE_COMMANDS[name].split(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), function)
    return found


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in SERVICE_COMMANDS:
        names = ", ".join(SERVICE_COMMANDS)
        typer.echo(f"usage: python -m tether.cli.services <{names}> [options]", err=True)
        raise SystemExit(2)
    name, options = argv[0], argv[1:]
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(name)(command(name))
    app(args=options, prog_name=f"tether {name}")


if __name__ == "__main__":
    main(sys.argv[1:])
