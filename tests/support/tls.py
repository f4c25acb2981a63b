"""TLS settings for a test's processes: the CA `tether certs init` made in a directory, and one
of its certificates."""

from __future__ import annotations

from pathlib import Path

from tether.config import TlsSettings
from tether.region.certs import CertFiles, ca_files


def tls_settings(
    directory: Path,
    name: str | None = None,
    *,
    mutual: bool = False,
    server_name: str | None = None,
) -> TlsSettings:
    """Trusting the CA in `directory`, showing certificate `name` (None: one that has none)."""
    own = CertFiles.named(directory, name) if name else None
    return TlsSettings(
        ca_file=ca_files(directory).cert_file,
        cert_file=own.cert_file if own else None,
        key_file=own.key_file if own else None,
        mutual=mutual,
        server_name=server_name,
    )
