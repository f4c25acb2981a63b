"""The etcd store over TLS, as a production region runs it: etcd asks every client for a
certificate of the region's CA (--client-cert-auth), and the store shows one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.config import StoreSettings
from tether.region.certs import CertFiles, ca_files, init_certs
from tether.store import StoreError, open_store
from tether.store.etcd_server import ClientTls, EtcdServer


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    init_certs(directory)
    init_certs(directory / "stranger")
    return directory


@pytest.fixture(scope="module")
def server(tls_dir: Path) -> Iterator[EtcdServer]:
    own = CertFiles.named(tls_dir, "etcd")
    client_tls = ClientTls(ca_files(tls_dir).cert_file, own.cert_file, own.key_file)
    with EtcdServer(on_tmpfs=True, client_tls=client_tls) as running:
        yield running


def settings(server: EtcdServer, ca: Path | None, cert: CertFiles | None) -> StoreSettings:
    return StoreSettings(
        TETHER_STORE=server.url,
        ca_file=ca,
        cert_file=cert.cert_file if cert else None,
        key_file=cert.key_file if cert else None,
        timeout_s=3,
    )


async def test_a_client_with_the_region_ca_and_a_certificate_reads_writes_and_watches(
    server: EtcdServer, tls_dir: Path
) -> None:
    assert server.url.startswith("etcds://")
    admin = CertFiles.named(tls_dir, "admin")
    async with open_store(settings=settings(server, ca_files(tls_dir).cert_file, admin)) as store:
        lease = await store.lease_grant(30)
        written = await store.put("/tls/a", b"1", lease=lease)
        kv = await store.get("/tls/a")
        assert kv is not None
        assert kv.value == b"1"
        keys_seen: list[str] = []
        async with store.watch("/tls/", start_revision=written) as watch:
            await store.put("/tls/b", b"2")
            async for events in watch:
                keys_seen += [event.kv.key for event in events]
                if len(keys_seen) == 2:
                    break
        assert keys_seen == ["/tls/a", "/tls/b"]
        await store.lease_revoke(lease)
        assert await store.get("/tls/a") is None


@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate", "no CA"])
async def test_etcd_refuses_clients_without_a_certificate_of_the_region(
    server: EtcdServer, tls_dir: Path, who: str
) -> None:
    ca = ca_files(tls_dir).cert_file
    stranger = CertFiles.named(tls_dir / "stranger", "admin")
    admin = CertFiles.named(tls_dir, "admin")
    refused = {
        "no certificate": settings(server, ca, None),
        "another CA's certificate": settings(server, ca, stranger),
        # Trusting the system's CAs only: etcd's certificate is not among them.
        "no CA": settings(server, None, admin),
    }[who]
    async with open_store(settings=refused) as store:
        with pytest.raises(StoreError):
            await store.get("/tls/a")
