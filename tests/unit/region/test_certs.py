"""A region's certificates: what `tether certs init` and `issue` write, and TLS accepting them."""

from __future__ import annotations

import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from tether.region.certs import (
    LOCAL_HOSTS,
    SERVICES,
    SERVICES_NAME,
    CertFiles,
    CertsError,
    ca_files,
    ensure_certs,
    init_certs,
    issue_cert,
    names_in,
)


def handshake(
    server: CertFiles, ca: Path, host: str, client: CertFiles | None = None, *, mutual: bool
) -> None:
    """A TLS handshake in memory, each side verifying the other as Tether's servers and clients
    do (the client the server's name; under `mutual`, the server the client's certificate)."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(server.cert_file, server.key_file)
    if mutual:
        server_context.load_verify_locations(ca)
        server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        client_context.load_cert_chain(client.cert_file, client.key_file)
    pipes = [ssl.MemoryBIO() for _ in range(4)]
    server_side = server_context.wrap_bio(pipes[0], pipes[1], server_side=True)
    client_side = client_context.wrap_bio(pipes[2], pipes[3], server_hostname=host)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, side, outgoing, incoming in (
            ("client", client_side, pipes[3], pipes[0]),
            ("server", server_side, pipes[1], pipes[2]),
        ):
            try:
                side.do_handshake()
                done[name] = True
            except ssl.SSLWantReadError:
                pass
            incoming.write(outgoing.read())
        if all(done.values()):
            # TLS 1.3: the server judges the client's certificate after the client is done.
            server_side.write(b"x")
            pipes[2].write(pipes[1].read())
            assert client_side.read(1) == b"x"
            return
    raise AssertionError(f"the handshake did not finish: {done}")


def test_init_writes_a_ca_and_a_certificate_per_service(tmp_path: Path) -> None:
    made = init_certs(tmp_path / "tls", ["tether.example", "10.1.2.3"])
    assert made[0] == ca_files(tmp_path / "tls")
    assert [files.cert_file.stem for files in made[1:]] == list(SERVICES)
    for files in made:
        assert stat.S_IMODE(files.key_file.stat().st_mode) == 0o600
    frontend = CertFiles.named(tmp_path / "tls", "frontend")
    assert names_in(frontend) == {*LOCAL_HOSTS, SERVICES_NAME, "tether.example", "10.1.2.3"}
    cert = x509.load_pem_x509_certificate(frontend.cert_file.read_bytes())
    ca = x509.load_pem_x509_certificate(made[0].cert_file.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert cert.subject.rfc4514_string() == "CN=frontend"


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "10.1.2.3", "tether.example"])
def test_python_tls_accepts_the_certificates_for_every_name_they_carry(
    tmp_path: Path, host: str
) -> None:
    made = init_certs(tmp_path, ["tether.example", "10.1.2.3"])
    ca = made[0].cert_file
    registry = CertFiles.named(tmp_path, "registry")
    handshake(registry, ca, host, mutual=False)
    handshake(registry, ca, host, CertFiles.named(tmp_path, "scheduler"), mutual=True)


def test_tls_refuses_another_name_another_ca_and_a_missing_client_certificate(
    tmp_path: Path,
) -> None:
    made = init_certs(tmp_path / "a")
    ca = made[0].cert_file
    registry = CertFiles.named(tmp_path / "a", "registry")
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(registry, ca, "tether.example", mutual=False)
    init_certs(tmp_path / "b")
    stranger = CertFiles.named(tmp_path / "b", "scheduler")
    with pytest.raises(ssl.SSLError):
        handshake(registry, ca, "localhost", stranger, mutual=True)
    with pytest.raises(ssl.SSLError):
        handshake(registry, ca, "localhost", None, mutual=True)
    other_ca = ca_files(tmp_path / "b").cert_file
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(registry, other_ca, "localhost", mutual=False)


def test_issue_signs_one_more_and_replaces_an_old_one(tmp_path: Path) -> None:
    init_certs(tmp_path)
    first = issue_cert(tmp_path, "appsched-ads", ["appsched.example"])
    before = first.cert_file.read_bytes()
    assert "appsched.example" in names_in(first)
    again = issue_cert(tmp_path, "appsched-ads", ["192.0.2.7"])
    assert again == first
    assert again.cert_file.read_bytes() != before
    assert "192.0.2.7" in names_in(again)
    assert ipaddress.ip_address("192.0.2.7")  # an IP is an IP name, not a DNS one
    handshake(again, ca_files(tmp_path).cert_file, "192.0.2.7", mutual=False)


@pytest.mark.parametrize(
    ("name", "problem"),
    [("Appsched", "lowercase"), ("ca", "not 'ca'"), ("a/b", "lowercase"), ("-x", "lowercase")],
)
def test_issue_refuses_a_bad_name(tmp_path: Path, name: str, problem: str) -> None:
    init_certs(tmp_path)
    before = {path: path.read_bytes() for path in tmp_path.iterdir()}
    with pytest.raises(CertsError, match=problem):
        issue_cert(tmp_path, name)
    assert {path: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_init_refuses_a_directory_with_a_ca_and_issue_one_without(tmp_path: Path) -> None:
    init_certs(tmp_path / "tls")
    before = ca_files(tmp_path / "tls").cert_file.read_bytes()
    with pytest.raises(CertsError, match="already has a CA"):
        init_certs(tmp_path / "tls")
    assert ca_files(tmp_path / "tls").cert_file.read_bytes() == before
    with pytest.raises(CertsError, match="no CA"):
        issue_cert(tmp_path / "empty", "appsched")
    with pytest.raises(CertsError, match="--host"):
        issue_cert(tmp_path / "tls", "appsched", ["two words"])


def test_ensure_keeps_what_is_there_and_makes_what_is_missing(tmp_path: Path) -> None:
    ensure_certs(tmp_path)
    ca = ca_files(tmp_path).cert_file.read_bytes()
    frontend = CertFiles.named(tmp_path, "frontend").cert_file.read_bytes()
    CertFiles.named(tmp_path, "agent").cert_file.unlink()
    ensure_certs(tmp_path)
    assert ca_files(tmp_path).cert_file.read_bytes() == ca
    assert CertFiles.named(tmp_path, "frontend").cert_file.read_bytes() == frontend
    agent = CertFiles.named(tmp_path, "agent")
    assert agent.exist()
    handshake(agent, ca_files(tmp_path).cert_file, "localhost", mutual=False)


def test_ensure_makes_anew_the_certificates_a_new_host_is_not_in(tmp_path: Path) -> None:
    ensure_certs(tmp_path)
    ca = ca_files(tmp_path).cert_file.read_bytes()
    ensure_certs(tmp_path, ["192.0.2.7"])
    frontend = CertFiles.named(tmp_path, "frontend")
    assert "192.0.2.7" in names_in(frontend)
    assert ca_files(tmp_path).cert_file.read_bytes() == ca
    handshake(frontend, ca_files(tmp_path).cert_file, "192.0.2.7", mutual=False)
    kept = frontend.cert_file.read_bytes()
    ensure_certs(tmp_path, ["192.0.2.7"])
    assert frontend.cert_file.read_bytes() == kept
