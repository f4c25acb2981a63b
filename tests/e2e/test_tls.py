"""`tether up --tls --etcd`: the README's tour over TLS, every hop encrypted, and the clients the
region must refuse (plain HTTP, an unknown CA, a service's client without a certificate)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from tests.support.harness import LocalRegion, all_running, sleeper_job, wait_for
from tests.support.readme import make_home, run_shell, tour_blocks
from tether.config import StoreSettings
from tether.model import AgentHeartbeat, from_json
from tether.proto.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc
from tether.region.certs import CertFiles
from tether.store import StoreError, keys, open_store
from tether.tls import client_context


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    running = LocalRegion(make_home(tmp_path_factory.mktemp("tls")), ["--etcd"], tls=True)
    try:
        running.start()
        yield running
    finally:
        running.cleanup()


def by_region_dir(region: LocalRegion, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: the region found by its directory alone (URL, token and CA)."""
    env = {**os.environ, "TETHER_REGION_DIR": str(region.state_dir)}
    for name in ("TETHER_URL", "TETHER_TOKEN", "TETHER_CA_FILE", "TETHER_TLS_CA_FILE"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "tether.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def tether(region: LocalRegion, *args: str) -> str:
    done = by_region_dir(region, *args)
    assert done.returncode == 0, f"tether {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def certificate(region: LocalRegion, name: str) -> CertFiles:
    return CertFiles.named(region.state_dir / "tls", name)


def test_the_tour_over_tls(region: LocalRegion) -> None:
    state = region.state()
    assert state.url.startswith("https://")
    assert state.store.startswith("etcds://")
    assert state.ca_file == region.ca_file
    assert all(url.startswith("https://") for url in state.metrics.values())

    # The README's tour as written, in the directory that holds `.tether`: the CLI finds the
    # URL, the token and the CA there; curl is given the CA.
    with region.client() as client:
        since = client.get("/v1/jobs").headers["X-Tether-Revision"]
    home = region.state_dir.parent
    cli, curl, over_tls = tour_blocks()
    said = run_shell(cli.commands(), home, region.url)
    assert "hello from task default/hello/0" in said
    assert "all 5 tasks run version 2" in said
    token = curl.commands()[0]
    assert token.startswith("TOKEN=")
    assert '"jobs":[]' in run_shell([token, *over_tls.commands()], home, region.url).replace(
        " ", ""
    )

    # The event stream (Server-Sent Events) over TLS told the tour's job from its submission.
    told = tether(region, "events", "--since", since, "--job", "default/hello", "-o", "json")
    kinds = [json.loads(line)["kind"] for line in told.splitlines()]
    assert kinds[:2] == ["job.submitted", "job.queued"], kinds
    assert {"task.started", "job.deleted"} <= set(kinds)


def test_plain_http_and_a_client_that_does_not_trust_the_region_are_refused(
    region: LocalRegion,
) -> None:
    plain = region.url.replace("https://", "http://")
    with httpx.Client(timeout=10) as client, pytest.raises(httpx.TransportError):
        client.get(f"{plain}/readyz")
    with httpx.Client(timeout=10) as client, pytest.raises(httpx.ConnectError) as refused:
        client.get(f"{region.url}/readyz")  # the system's CAs never signed the region's
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)

    # The CLI without the region's CA says what to set, in one line.
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli.main", "job", "ls"],
        env={
            **{k: v for k, v in os.environ.items() if k not in ("TETHER_CA_FILE",)},
            "TETHER_URL": region.url,
            "TETHER_TOKEN": region.token,
            "TETHER_REGION_DIR": str(region.state_dir.parent / "elsewhere"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "TETHER_CA_FILE" in done.stderr
    assert "Traceback" not in done.stderr


async def call_registry(region: LocalRegion, credentials: grpc.ChannelCredentials | None) -> str:
    """The status code name a Renew call to the region's registry ends with."""
    address = region.registry_address
    channel = (
        grpc.aio.secure_channel(address, credentials)
        if credentials
        else grpc.aio.insecure_channel(address)
    )
    async with channel:
        stub = taskcontrol_pb2_grpc.TaskControllerRegistryStub(channel)
        try:
            await stub.Renew(pb.RenewRequest(registration_id="none"), timeout=5)
        except grpc.aio.AioRpcError as error:
            return error.code().name
    return "OK"


async def call_allocator(address: str, credentials: grpc.ChannelCredentials) -> str:
    async with grpc.aio.secure_channel(address, credentials) as channel:
        stub = allocator_pb2_grpc.AllocatorStub(channel)
        try:
            await stub.Explain(allocator_pb2.ExplainRequest(job_handle="default/none"), timeout=5)
        except grpc.aio.AioRpcError as error:
            return error.code().name
    return "OK"


def test_services_answer_only_clients_with_a_certificate_of_the_region(
    region: LocalRegion,
) -> None:
    assert region.ca_file is not None
    ca = region.ca_file.read_bytes()
    admin = certificate(region, "admin")
    with_cert = grpc.ssl_channel_credentials(
        ca, admin.key_file.read_bytes(), admin.cert_file.read_bytes()
    )
    without_cert = grpc.ssl_channel_credentials(ca)

    # The registry: reached with a certificate (the call itself then wants a token).
    assert asyncio.run(call_registry(region, with_cert)) == "UNAUTHENTICATED"
    assert asyncio.run(call_registry(region, without_cert)) == "UNAVAILABLE"
    assert asyncio.run(call_registry(region, None)) == "UNAVAILABLE"

    allocators = json.loads(tether(region, "status", "-o", "json"))["allocators"]
    address = allocators[0]["address"]
    assert asyncio.run(call_allocator(address, with_cert)) == "NOT_FOUND"
    assert asyncio.run(call_allocator(address, without_cert)) == "UNAVAILABLE"

    async def agent_address() -> str:
        async with open_store(settings=region.store_settings()) as store:
            kv = await store.get(keys.heartbeat("m01"))
            assert kv is not None
            return from_json(AgentHeartbeat, kv.value, stored=True).address

    agent = asyncio.run(agent_address())
    assert agent.startswith("https://")
    admin_context = client_context(region.ca_file, admin.cert_file, admin.key_file)
    with httpx.Client(verify=admin_context, timeout=10) as client:
        assert client.get(f"{agent}/healthz").status_code == 200
    without = client_context(region.ca_file)
    with httpx.Client(verify=without, timeout=10) as client, pytest.raises(httpx.TransportError):
        client.get(f"{agent}/healthz")

    # etcd asks its clients for a certificate too.
    async def read_without_a_certificate() -> None:
        settings = StoreSettings(
            TETHER_STORE=region.store_url(), ca_file=region.ca_file, timeout_s=3
        )
        async with open_store(settings=settings) as store:
            await store.get(keys.heartbeat("m01"))

    with pytest.raises(StoreError):
        asyncio.run(read_without_a_certificate())


def test_an_application_scheduler_with_a_certificate_of_the_region_approves_operations(
    region: LocalRegion, tmp_path: Path
) -> None:
    assert region.ca_file is not None
    tls_dir = str(region.ca_file.parent)
    issued = by_region_dir(region, "certs", "issue", "appsched-gang", "--dir", tls_dir)
    assert issued.returncode == 0, issued.stderr
    own = certificate(region, "appsched-gang")
    command = [
        sys.executable,
        *("-m", "tether.cli.main", "appsched", "gang", "--job", "default/gang", "--ttl", "30"),
        *("--registry", region.registry_address),
    ]
    base_env = {
        **os.environ,
        "TETHER_TOKEN": region.token,
        "TETHER_TLS_CA_FILE": str(region.ca_file),
    }

    # Without a certificate of its own, the registry does not let it in.
    refused = subprocess.run(
        command, env=base_env, capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 1
    assert "cannot reach the TaskController registry" in refused.stderr

    handle = "default/gang"
    log_path = tmp_path / "gang.log"
    with region.client() as client:
        response = client.post("/v1/jobs", json=sleeper_job("gang", 3))
        assert response.status_code == 201, response.text
        wait_for(lambda: all_running(client, handle, 3), timeout_s=60, what=handle)
        env = {
            **base_env,
            "TETHER_TLS_CERT_FILE": str(own.cert_file),
            "TETHER_TLS_KEY_FILE": str(own.key_file),
            "TETHER_TLS_MUTUAL": "true",
        }
        with log_path.open("wb") as log:
            controller = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=env
            )
        try:
            wait_for(
                lambda: re.search(r"serving on (\S+), registration (\S+)", log_path.read_text()),
                timeout_s=20,
                what="the controller to register",
            )
            patched = client.patch(f"/v1/jobs/{handle}", json={"version": "2"})
            assert patched.status_code == 200, patched.text

            def updated() -> bool:
                tasks = all_running(client, handle, 3)
                return bool(tasks) and all(t["version"] == "2" for t in tasks or [])

            wait_for(updated, timeout_s=40, what="every task on version 2")
        finally:
            controller.send_signal(signal.SIGTERM)
            controller.wait(15)
        client.delete(f"/v1/jobs/{handle}")
    # The region's scheduler called the controller (over mutual TLS), which approved all three.
    assert re.search(rf"{handle}: acked 3 of 3 pending", log_path.read_text())
