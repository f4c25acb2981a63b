"""What every service's command shares: settings from options, and running the service."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pydantic
import typer

from tether.config import TlsSettings
from tether.metrics_server import MetricsPortUnavailable, WithMetrics
from tether.service import InRegion, Service, connect_store, run
from tether.store import Store, StoreError

S = TypeVar("S")

LogLevel = typer.Option(
    "INFO",
    "--log-level",
    help="DEBUG, INFO, WARNING or ERROR. At DEBUG an HTTP service also logs every request.",
)


def metrics_port_option(service: str) -> Any:
    """`--metrics-port` of a service's command, also set by TETHER_<SERVICE>_METRICS_PORT."""
    return typer.Option(
        0,
        "--metrics-port",
        min=0,
        max=65535,
        envvar=f"TETHER_{service.upper()}_METRICS_PORT",
        help="Serve Prometheus metrics at /metrics on this port, on TETHER_METRICS_HOST "
        "(127.0.0.1); 0: not served.",
    )


def load_settings(factory: Callable[[], S], options: dict[str, str]) -> S:
    """Settings from the environment and command-line options; exits 2 with the reason if they
    are invalid. `options` maps each field to the option that sets it, for the message."""
    try:
        return factory()
    except pydantic.ValidationError as error:
        # TLS settings come from the environment alone, whichever service reads them.
        tls = error.title == TlsSettings.__name__
        for problem in error.errors(include_url=False):
            field = str(problem["loc"][0]) if problem["loc"] else ""
            option = f"TETHER_TLS_{field.upper()}" if tls and field else options.get(field, field)
            option = option or ("TETHER_TLS_*" if tls else "settings")
            if problem["type"] == "missing":
                typer.echo(f"error: {option} is required", err=True)
            else:
                typer.echo(f"error: {option}: {problem['msg']}", err=True)
        raise typer.Exit(2) from None


def serve(
    make_service: Callable[[Store], Service],
    url: str | None,
    log_level: str,
    metrics_port: int = 0,
) -> None:
    """Runs the service on the store at `url` until SIGINT/SIGTERM, and the process's metrics
    on `metrics_port` unless it is 0; store errors (a store that holds no region among them)
    and a metrics port in use exit 1."""
    try:
        # A store file that is not there is no region: found so, it is not created either.
        store = connect_store(url, create=False)
        service: Service = InRegion(make_service(store), store)
        if metrics_port:
            service = WithMetrics(service, metrics_port, tls=load_settings(TlsSettings, {}))
        run(service, log_level)
    except (StoreError, MetricsPortUnavailable) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
