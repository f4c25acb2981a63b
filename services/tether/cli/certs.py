"""`tether certs`: a region's CA and the certificates it signs, for TLS on every hop."""

from __future__ import annotations

from pathlib import Path

import typer

from tether.cli.common import fail, out
from tether.region.certs import DEFAULT_DAYS, SERVICES, CertsError, init_certs, issue_cert

app = typer.Typer(help="Make a region's CA and its certificates (TLS and mutual TLS).")

_HOSTS_HELP = (
    "A DNS name or IP address the certificates are valid for, besides localhost, 127.0.0.1 "
    "and ::1; repeat for more (every host or Service name clients use)."
)


@app.command("init")
def init(
    directory: Path = typer.Option(
        ..., "--dir", file_okay=False, help="Where to write the files.", show_default=False
    ),
    hosts: list[str] = typer.Option([], "--host", help=_HOSTS_HELP, show_default=False),
    days: int = typer.Option(DEFAULT_DAYS, "--days", min=1, help="How long the certificates last."),
) -> None:
    """Create a region CA (ca.pem, ca.key) and a certificate per service, each NAME.pem with its
    key NAME.key (mode 0600). Give every service TETHER_TLS_CA_FILE=ca.pem and its own
    TETHER_TLS_CERT_FILE and TETHER_TLS_KEY_FILE; TETHER_TLS_MUTUAL=true makes services refuse
    clients without a certificate. Keep ca.key off the region's hosts once done."""
    try:
        made = init_certs(directory, hosts, days=days)
    except (CertsError, OSError) as error:
        fail(str(error))
    for files in made:
        out().print(f"{files.cert_file}  {files.key_file}", soft_wrap=True, highlight=False)
    services = ", ".join(SERVICES)
    out().print(f"Created a region CA and certificates for {services}.", soft_wrap=True)


@app.command("issue")
def issue(
    name: str = typer.Argument(
        ..., help="The certificate's name, e.g. appsched-ads: written as NAME.pem and NAME.key."
    ),
    directory: Path = typer.Option(
        ...,
        "--dir",
        file_okay=False,
        help="The directory of tether certs init.",
        show_default=False,
    ),
    hosts: list[str] = typer.Option([], "--host", help=_HOSTS_HELP, show_default=False),
    days: int = typer.Option(DEFAULT_DAYS, "--days", min=1, help="How long the certificate lasts."),
) -> None:
    """Sign one more certificate with the region's CA: for an application-level scheduler
    (which serves TaskController and calls the registry under mutual TLS), a service on a new
    host, or one due for renewal (the old one is replaced)."""
    try:
        files = issue_cert(directory, name, hosts, days=days)
    except (CertsError, OSError) as error:
        fail(str(error))
    out().print(f"{files.cert_file}  {files.key_file}", soft_wrap=True, highlight=False)
