"""A region's certificates: its own CA, and a certificate it signs for each service or client."""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICES: Final = (
    "frontend",
    "registry",
    "allocator",
    "scheduler",
    "broker",
    "health",
    "rebalancer",
    "agent",
    "etcd",
    "admin",
)
"""Each gets its own certificate from `tether certs init`, named after it: Tether's services,
etcd (serving the store), and the operator's commands that reach the store or a service
directly (`tether up`, `tether region init`)."""
LOCAL_HOSTS: Final = ("localhost", "127.0.0.1", "::1")
"""In every certificate's names, so that a region on one machine needs no `--host`."""
SERVICES_NAME: Final = "services.tether.internal"
"""In every certificate's names too: what clients check instead of an address no certificate
can list in advance (TETHER_TLS_SERVER_NAME), such as a pod's IP."""
CA_NAME: Final = "ca"
CA_COMMON_NAME: Final = "tether region CA"
DEFAULT_DAYS: Final = 825
CA_DAYS: Final = 3650
_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class CertsError(Exception):
    """Certificates cannot be made as asked; the message says why."""


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its private key, PEM files side by side."""

    cert_file: Path
    key_file: Path

    @classmethod
    def named(cls, directory: Path, name: str) -> CertFiles:
        """`<directory>/<name>.pem` and `<directory>/<name>.key`."""
        return cls(directory / f"{name}.pem", directory / f"{name}.key")

    def exist(self) -> bool:
        return self.cert_file.is_file() and self.key_file.is_file()


def ca_files(directory: Path) -> CertFiles:
    """The region CA's certificate and key in `directory`."""
    return CertFiles.named(directory, CA_NAME)


def init_certs(
    directory: Path, hosts: Iterable[str] = (), *, days: int = DEFAULT_DAYS
) -> list[CertFiles]:
    """Creates a region CA in `directory` and a certificate for each of SERVICES, valid for
    LOCAL_HOSTS and `hosts`; refuses a directory that already has a CA."""
    ca = ca_files(directory)
    if ca.cert_file.exists() or ca.key_file.exists():
        raise CertsError(f"{directory} already has a CA ({ca.cert_file}); choose another --dir")
    hosts = list(hosts)
    _check_hosts(hosts)
    directory.mkdir(parents=True, exist_ok=True)
    _write_ca(ca)
    return [ca, *(issue_cert(directory, name, hosts, days=days) for name in SERVICES)]


def ensure_certs(directory: Path, hosts: Iterable[str] = ()) -> None:
    """The CA and every service's certificate in `directory`: those missing, or not valid for
    every one of `hosts`, are made anew, the others kept (`tether up --tls` starting a region
    again, perhaps on another `--host`)."""
    hosts = list(hosts)
    if not ca_files(directory).exist():
        init_certs(directory, hosts)
        return
    for name in SERVICES:
        files = CertFiles.named(directory, name)
        if not files.exist() or not set(hosts) <= names_in(files):
            issue_cert(directory, name, hosts)


def names_in(files: CertFiles) -> set[str]:
    """The host names and addresses a certificate is valid for."""
    cert = x509.load_pem_x509_certificate(files.cert_file.read_bytes())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(name) for name in san.get_values_for_type(x509.DNSName)} | {
        str(address) for address in san.get_values_for_type(x509.IPAddress)
    }


def issue_cert(
    directory: Path, name: str, hosts: Iterable[str] = (), *, days: int = DEFAULT_DAYS
) -> CertFiles:
    """A certificate named `name` (for a service, or a client such as an application-level
    scheduler) signed by the CA in `directory`, valid for LOCAL_HOSTS and `hosts`, for serving
    and for showing as a client; an existing one of that name is replaced."""
    if not _NAME.match(name) or name == CA_NAME:
        raise CertsError(
            f"certificate name {name!r}: expected lowercase letters, digits and '-', not 'ca'"
        )
    hosts = list(hosts)
    _check_hosts(hosts)
    ca = ca_files(directory)
    if not ca.exist():
        raise CertsError(f"{directory} has no CA ({ca.cert_file}): run tether certs init first")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_file.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key_file.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise CertsError(f"{ca.key_file}: expected the EC key tether certs init writes")
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys([*LOCAL_HOSTS, SERVICES_NAME, *hosts]):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        _builder(_subject(name), ca_cert.subject, key.public_key(), days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signing_certs=False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = CertFiles.named(directory, name)
    _write(files, cert, key)
    return files


def _write_ca(files: CertFiles) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _subject(CA_COMMON_NAME)
    cert = (
        _builder(subject, subject, key.public_key(), CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signing_certs=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write(files, cert, key)


def _subject(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # A few minutes back: a host whose clock lags the signer's accepts it at once.
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _key_usage(*, signing_certs: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signing_certs,
        crl_sign=signing_certs,
        encipher_only=False,
        decipher_only=False,
    )


def _check_hosts(hosts: list[str]) -> None:
    for host in hosts:
        if not host or any(c.isspace() for c in host) or "/" in host:
            raise CertsError(f"--host {host!r}: expected a DNS name or an IP address")


def _write(files: CertFiles, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    # The key is never readable by others, not even between its creation and a chmod.
    descriptor = os.open(files.key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    files.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
