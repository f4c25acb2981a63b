"""The TaskController registry on a real store, called over real gRPC on loopback, and an SDK
controller registering with it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from tests.support.allocator_builders import entitlement
from tests.support.tls import tls_settings
from tests.support.waiting import eventually
from tether.config import TlsSettings
from tether.model import (
    ControllerRegistration,
    PrincipalRecord,
    Role,
    from_json,
    to_json,
    token_digest,
)
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc
from tether.region.certs import SERVICES_NAME, init_certs, issue_cert
from tether.scheduler.taskcontrol import ControllerClient, ControllerFailed
from tether.store import Store, keys, open_store
from tether.taskcontrol.registry.service import Registry
from tether.taskcontrol.registry.settings import RegistrySettings
from tether.taskcontrol.sdk import Controller

ALICE, BOB, ROOT = "alice-token", "bob-token", "root-token"


@pytest.fixture
async def region(store: Store) -> Store:
    """Entitlement ads with member alice, ml with member bob; root is an admin."""
    for token, record in (
        (ALICE, PrincipalRecord(name="alice")),
        (BOB, PrincipalRecord(name="bob")),
        (ROOT, PrincipalRecord(name="root", roles=[Role.ADMIN])),
    ):
        await store.put(keys.principal(token_digest(token)), to_json(record))
    for name, member in (("ads", "alice"), ("ml", "bob")):
        team = entitlement(name).model_copy(update={"members": [member]})
        await store.put(keys.entitlement(name), to_json(team))
    return store


@pytest.fixture
async def registry(region: Store, store_url: str) -> AsyncIterator[Registry]:
    service = Registry(open_store(store_url), RegistrySettings(default_ttl_s=5, max_ttl_s=30))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@pytest.fixture
async def client(
    registry: Registry,
) -> AsyncIterator[taskcontrol_pb2_grpc.TaskControllerRegistryAsyncStub]:
    async with grpc.aio.insecure_channel(registry.address) as channel:
        yield taskcontrol_pb2_grpc.TaskControllerRegistryStub(channel)


def bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


async def stored_registrations(store: Store) -> list[str]:
    return [keys.last_segment(kv.key) for kv in (await store.range(keys.CONTROLLERS)).kvs]


async def read_registration(store: Store, registration_id: str) -> ControllerRegistration | None:
    kv = await store.get(keys.controller(registration_id))
    return None if kv is None else from_json(ControllerRegistration, kv.value, stored=True)


async def test_register_list_renew_unregister(
    region: Store, client: taskcontrol_pb2_grpc.TaskControllerRegistryAsyncStub
) -> None:
    registered = await client.Register(
        pb.RegisterRequest(job_handle="ads/web", endpoint="127.0.0.1:7000", ttl_seconds=10),
        metadata=bearer(ALICE),
    )
    assert registered.ttl_seconds == 10
    assert await stored_registrations(region) == [registered.registration_id]

    listed = await client.List(pb.ListRequest(), metadata=bearer(ALICE))
    [registration] = listed.registrations
    assert (registration.registration_id, registration.job_handle) == (
        registered.registration_id,
        "ads/web",
    )
    assert (registration.endpoint, registration.principal) == ("127.0.0.1:7000", "alice")

    await asyncio.sleep(1.1)
    renewed = await client.Renew(
        pb.RenewRequest(registration_id=registered.registration_id), metadata=bearer(ALICE)
    )
    assert renewed.expires_at.ToDatetime() > registered.expires_at.ToDatetime()

    await client.Unregister(
        pb.UnregisterRequest(registration_id=registered.registration_id), metadata=bearer(ALICE)
    )
    assert await stored_registrations(region) == []
    # Unregistering again is no error.
    await client.Unregister(
        pb.UnregisterRequest(registration_id=registered.registration_id), metadata=bearer(ALICE)
    )


async def test_a_registration_lapses_unless_renewed(
    region: Store, client: taskcontrol_pb2_grpc.TaskControllerRegistryAsyncStub
) -> None:
    registered = await client.Register(
        pb.RegisterRequest(entitlement="ads", endpoint="127.0.0.1:7000", ttl_seconds=1),
        metadata=bearer(ALICE),
    )
    await eventually(
        lambda: stored_registrations(region), lambda ids: ids == [], timeout_s=5, what="lapse"
    )
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await client.Renew(
            pb.RenewRequest(registration_id=registered.registration_id), metadata=bearer(ALICE)
        )
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND
    assert registered.registration_id in (raised.value.details() or "")


@pytest.mark.parametrize("registration_id", ["", "a/b", "no-such-id"])
async def test_renewing_an_unknown_id_is_not_found(
    client: taskcontrol_pb2_grpc.TaskControllerRegistryAsyncStub, registration_id: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await client.Renew(pb.RenewRequest(registration_id=registration_id), metadata=bearer(ALICE))
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND
    assert "does not exist" in (raised.value.details() or "")


@pytest.mark.parametrize(
    ("token", "request_", "code", "message"),
    [
        (
            BOB,
            pb.RegisterRequest(job_handle="ads/web", endpoint="127.0.0.1:7000"),
            grpc.StatusCode.PERMISSION_DENIED,
            "principal 'bob' is not a member of entitlement 'ads'",
        ),
        (
            "nobody",
            pb.RegisterRequest(entitlement="ads", endpoint="127.0.0.1:7000"),
            grpc.StatusCode.UNAUTHENTICATED,
            "not known",
        ),
        (
            "",
            pb.RegisterRequest(entitlement="ads", endpoint="127.0.0.1:7000"),
            grpc.StatusCode.UNAUTHENTICATED,
            "authorization: Bearer",
        ),
        (
            ALICE,
            pb.RegisterRequest(endpoint="127.0.0.1:7000"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "exactly one scope",
        ),
        (
            ALICE,
            pb.RegisterRequest(entitlement="ads", endpoint="localhost"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "endpoint",
        ),
        (
            ALICE,
            pb.RegisterRequest(entitlement="ads", endpoint="127.0.0.1:70000"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "port must be 1-65535",
        ),
        (
            ALICE,
            pb.RegisterRequest(job_handle="ads/Web!", endpoint="127.0.0.1:7000"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid job handle",
        ),
        (
            ALICE,
            pb.RegisterRequest(entitlement="search", endpoint="127.0.0.1:7000"),
            grpc.StatusCode.NOT_FOUND,
            "entitlement 'search' does not exist",
        ),
    ],
)
async def test_refused_registrations_change_nothing(
    region: Store,
    client: taskcontrol_pb2_grpc.TaskControllerRegistryAsyncStub,
    token: str,
    request_: pb.RegisterRequest,
    code: grpc.StatusCode,
    message: str,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await client.Register(request_, metadata=bearer(token) if token else ())
    assert raised.value.code() is code
    assert message in (raised.value.details() or "")
    assert await stored_registrations(region) == []


async def test_others_cannot_see_renew_or_remove_a_registration(
    region: Store, client: taskcontrol_pb2_grpc.TaskControllerRegistryAsyncStub
) -> None:
    ads = await client.Register(
        pb.RegisterRequest(entitlement="ads", endpoint="127.0.0.1:7000"), metadata=bearer(ALICE)
    )
    ml = await client.Register(
        pb.RegisterRequest(entitlement="ml", endpoint="127.0.0.1:7001"), metadata=bearer(BOB)
    )
    seen_by_bob = await client.List(pb.ListRequest(), metadata=bearer(BOB))
    assert [r.registration_id for r in seen_by_bob.registrations] == [ml.registration_id]
    seen_by_root = await client.List(pb.ListRequest(entitlement="ads"), metadata=bearer(ROOT))
    assert [r.registration_id for r in seen_by_root.registrations] == [ads.registration_id]
    for call in (
        client.Renew(pb.RenewRequest(registration_id=ads.registration_id), metadata=bearer(BOB)),
        client.Unregister(
            pb.UnregisterRequest(registration_id=ads.registration_id), metadata=bearer(BOB)
        ),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await call
        assert raised.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert sorted(await stored_registrations(region)) == sorted(
        [ads.registration_id, ml.registration_id]
    )


class FirstOnly(Controller):
    """Approves the first pending operation of every call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def decide(self, request: pb.TaskControlRequest) -> Iterable[str]:
        self.calls.append(request.sequence_number)
        return [operation.id for operation in request.pending_operations[:1]] + ["unknown"]


async def test_an_sdk_controller_registers_serves_and_unregisters(
    region: Store, registry: Registry
) -> None:
    controller = FirstOnly()
    # A 6 s TTL renewed every 2 s: a loaded 2-core machine stalled a 1 s renewal past a 3 s TTL.
    await controller.start("127.0.0.1:0", registry.address, ALICE, job_handle="ads/web", ttl_s=6)
    try:
        assert await stored_registrations(region) == [controller.registration_id]
        registered = await read_registration(region, controller.registration_id)
        assert registered is not None
        async with grpc.aio.insecure_channel(controller.address) as channel:
            stub = taskcontrol_pb2_grpc.TaskControllerStub(channel)
            pending = [
                pb.TaskOperation(id=f"op-{n}", kind=pb.OPERATION_KIND_RESTART) for n in range(3)
            ]
            request = pb.TaskControlRequest(
                job_handle="ads/web", sequence_number=5, pending_operations=pending
            )
            first = await stub.Process(request)
            # Only ids of pending operations come back, each once.
            assert list(first.acknowledged_operation_ids) == ["op-0"]
            # A call that is not newer comes from a stale scheduler: nothing is approved.
            stale = await stub.Process(request)
            assert list(stale.acknowledged_operation_ids) == []
            assert controller.calls == [5]
        # Renewed every 2 s: it outlives its 6 s TTL. A renewal made after that TTL ran out
        # shows it (of a lapsed registration, it would have failed, and the controller
        # registered again under another id).
        outlived = registered.expires_at + timedelta(seconds=registered.ttl_s)
        await eventually(
            lambda: read_registration(region, controller.registration_id),
            lambda renewed: renewed is not None and renewed.expires_at >= outlived,
            timeout_s=20,
            what="a renewal after the first TTL",
        )
        assert await stored_registrations(region) == [controller.registration_id]
    finally:
        await controller.stop()
    assert await stored_registrations(region) == []


async def test_an_sdk_controller_for_another_entitlement_is_refused(
    region: Store, registry: Registry
) -> None:
    controller = FirstOnly()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await controller.start("127.0.0.1:0", registry.address, BOB, entitlement="ads")
    assert raised.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert await stored_registrations(region) == []


async def test_over_mutual_tls_only_holders_of_the_region_certificates_register_and_call(
    region: Store, store_url: str, tmp_path: Path
) -> None:
    # On 127.0.0.2, an address no certificate lists (as a pod's IP): every client checks the
    # certificates' services name instead.
    init_certs(tmp_path)
    issue_cert(tmp_path, "appsched-ads")

    def tls(name: str | None) -> TlsSettings:
        return tls_settings(tmp_path, name, mutual=name is not None, server_name=SERVICES_NAME)

    settings = RegistrySettings(host="127.0.0.2", tls=tls("registry"))
    registry = Registry(open_store(store_url), settings)
    await registry.start()
    controller = FirstOnly()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await FirstOnly().start("127.0.0.2:0", registry.address, ALICE, tls=tls(None))
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        await controller.start(
            "127.0.0.2:0", registry.address, ALICE, job_handle="ads/web", tls=tls("appsched-ads")
        )
        registered = await read_registration(region, controller.registration_id)
        assert registered is not None
        request = pb.TaskControlRequest(
            job_handle="ads/web",
            sequence_number=1,
            pending_operations=[pb.TaskOperation(id="op-0", kind=pb.OPERATION_KIND_RESTART)],
        )
        scheduler = ControllerClient(5.0, tls("scheduler"))
        try:
            assert await scheduler.process(registered, request) == ["op-0"]
        finally:
            await scheduler.close()
        stranger = ControllerClient(5.0, tls(None))
        try:
            with pytest.raises(ControllerFailed, match="UNAVAILABLE"):
                await stranger.process(registered, request)
        finally:
            await stranger.close()
        assert controller.calls == [1]
    finally:
        await controller.stop()
        await registry.stop()
