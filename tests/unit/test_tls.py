"""TLS settings (TETHER_TLS_*): what they accept, the errors a service's command prints for bad
ones, and what they make of uvicorn's and httpx's options."""

from __future__ import annotations

import ssl
from pathlib import Path

import pydantic
import pytest
from typer.testing import CliRunner

from tests.support.tls import tls_settings
from tether.cli.main import app
from tether.config import TlsSettings
from tether.region.certs import CertFiles, ca_files, init_certs
from tether.tls import client_context, http_scheme, http_server_options


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    init_certs(tmp_path)
    return tmp_path


def test_without_settings_nothing_is_tls() -> None:
    plain = TlsSettings()
    assert not plain.serving
    assert not plain.connecting
    assert http_scheme(plain) == "http"
    assert http_server_options(plain, verify_clients=True) == {}
    assert client_context(None) is True  # httpx then trusts the system's CAs


def test_mutual_servers_ask_clients_for_a_certificate_and_the_rest_api_does_not(
    tls_dir: Path,
) -> None:
    tls = tls_settings(tls_dir, "agent", mutual=True)
    assert http_scheme(tls) == "https"
    agent = http_server_options(tls, verify_clients=tls.mutual)
    assert agent["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert agent["ssl_ca_certs"] == str(ca_files(tls_dir).cert_file)
    rest = http_server_options(tls, verify_clients=False)
    assert "ssl_cert_reqs" not in rest
    assert rest["ssl_certfile"] == tls.cert_file


def test_a_client_context_trusts_the_region_ca_and_shows_its_certificate(tls_dir: Path) -> None:
    own = CertFiles.named(tls_dir, "frontend")
    context = client_context(ca_files(tls_dir).cert_file, own.cert_file, own.key_file)
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "tether region CA"),),)
    ]


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"TETHER_TLS_CA_FILE": "/nonexistent/ca.pem"}, "ca_file"),
        ({"TETHER_TLS_CERT_FILE": "{dir}/frontend.pem"}, "cert_file and key_file go together"),
        ({"TETHER_TLS_MUTUAL": "true"}, "mutual TLS needs ca_file, cert_file and key_file"),
        ({"TETHER_TLS_MUTUAL": "maybe"}, "mutual"),
        (
            {
                "TETHER_TLS_CERT_FILE": "{dir}/frontend.pem",
                "TETHER_TLS_KEY_FILE": "{dir}/agent.key",
            },
            "not a PEM certificate and its own key",
        ),
        ({"TETHER_TLS_CA_FILE": "{dir}/frontend.key"}, "ca_file .*frontend.key: not a PEM"),
    ],
)
def test_incomplete_settings_are_refused(
    tls_dir: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], problem: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(dir=tls_dir))
    with pytest.raises(pydantic.ValidationError, match=problem):
        TlsSettings()


def test_a_service_names_the_variable_that_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_TLS_CA_FILE", "/nonexistent/ca.pem")
    ran = CliRunner().invoke(app, ["registry", "--store", "sqlite:////nonexistent/region.db"])
    assert ran.exit_code == 2
    assert "error: TETHER_TLS_CA_FILE: Path does not point to a file" in ran.output
    monkeypatch.delenv("TETHER_TLS_CA_FILE")
    monkeypatch.setenv("TETHER_TLS_MUTUAL", "true")
    ran = CliRunner().invoke(app, ["frontend", "--store", "sqlite:////nonexistent/region.db"])
    assert ran.exit_code == 2
    assert "mutual TLS needs ca_file" in ran.output


def test_certs_init_and_issue_from_the_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(app, ["certs", "init", "--dir", str(tmp_path), "--host", "10.0.0.5"])
    assert made.exit_code == 0, made.output
    assert f"{tmp_path}/ca.pem" in made.output
    assert "certificates for frontend, registry" in made.output
    again = runner.invoke(app, ["certs", "init", "--dir", str(tmp_path)])
    assert again.exit_code == 1
    assert "already has a CA" in again.output
    issued = runner.invoke(app, ["certs", "issue", "appsched-ads", "--dir", str(tmp_path)])
    assert issued.exit_code == 0, issued.output
    assert (tmp_path / "appsched-ads.pem").is_file()
    bad = runner.invoke(app, ["certs", "issue", "Ads", "--dir", str(tmp_path)])
    assert bad.exit_code == 1
    assert "lowercase" in bad.output
    assert bad.exception is None or isinstance(bad.exception, SystemExit)
