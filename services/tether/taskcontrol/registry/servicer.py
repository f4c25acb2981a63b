"""The gRPC face of the registry: reads the caller's token, converts messages, maps errors."""

from __future__ import annotations

from typing import Final, NoReturn, TypeVar

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from tether.model import ControllerRegistration, PrincipalRecord
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc
from tether.service import grpc_abort
from tether.store import StoreError, StoreUnavailable
from tether.taskcontrol.registry.registrations import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Registrations,
    RegistryError,
    Scope,
    Unauthenticated,
)

Request = TypeVar("Request")
Response = TypeVar("Response")

STATUS_CODES: Final[dict[type[Exception], grpc.StatusCode]] = {
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    NotFound: grpc.StatusCode.NOT_FOUND,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    StoreUnavailable: grpc.StatusCode.UNAVAILABLE,
    StoreError: grpc.StatusCode.INTERNAL,
}
"""The status of each domain error; the most specific class in an error's MRO wins."""

Context = grpc.aio.ServicerContext


async def _abort(context: Context[Request, Response], error: Exception) -> NoReturn:
    await grpc_abort(context, error, STATUS_CODES, (RegistryError, StoreError))


def _bearer_token(context: Context[Request, Response]) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


def _timestamp(registration: ControllerRegistration) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(registration.expires_at)
    return stamp


def _message(registration: ControllerRegistration) -> pb.Registration:
    message = pb.Registration(
        registration_id=registration.id,
        endpoint=registration.endpoint,
        principal=registration.principal,
        expires_at=_timestamp(registration),
    )
    if registration.job is not None:
        message.job_handle = registration.job
    else:
        message.entitlement = registration.entitlement
    return message


class RegistryServicer(taskcontrol_pb2_grpc.TaskControllerRegistryServicer):
    """tether.taskcontrol.v1.TaskControllerRegistry over `Registrations`."""

    def __init__(self, registrations: Registrations) -> None:
        self._registrations = registrations

    async def _principal(self, context: Context[Request, Response]) -> PrincipalRecord:
        return await self._registrations.principal(_bearer_token(context))

    async def Register(  # noqa: N802 (the generated servicer's method name)
        self, request: pb.RegisterRequest, context: Context[pb.RegisterRequest, pb.RegisterResponse]
    ) -> pb.RegisterResponse:
        try:
            principal = await self._principal(context)
            scope = Scope.of(job_handle=request.job_handle, entitlement=request.entitlement)
            registration = await self._registrations.register(
                principal, scope, request.endpoint, request.ttl_seconds
            )
        except Exception as error:
            await _abort(context, error)
        return pb.RegisterResponse(
            registration_id=registration.id,
            ttl_seconds=registration.ttl_s,
            expires_at=_timestamp(registration),
        )

    async def Renew(  # noqa: N802 (the generated servicer's method name)
        self, request: pb.RenewRequest, context: Context[pb.RenewRequest, pb.RenewResponse]
    ) -> pb.RenewResponse:
        try:
            principal = await self._principal(context)
            registration = await self._registrations.renew(principal, request.registration_id)
        except Exception as error:
            await _abort(context, error)
        return pb.RenewResponse(expires_at=_timestamp(registration))

    async def Unregister(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.UnregisterRequest,
        context: Context[pb.UnregisterRequest, pb.UnregisterResponse],
    ) -> pb.UnregisterResponse:
        try:
            principal = await self._principal(context)
            await self._registrations.unregister(principal, request.registration_id)
        except Exception as error:
            await _abort(context, error)
        return pb.UnregisterResponse()

    async def List(  # noqa: N802 (the generated servicer's method name)
        self, request: pb.ListRequest, context: Context[pb.ListRequest, pb.ListResponse]
    ) -> pb.ListResponse:
        try:
            principal = await self._principal(context)
            found = await self._registrations.list(principal, request.entitlement)
        except Exception as error:
            await _abort(context, error)
        return pb.ListResponse(registrations=[_message(r) for r in found])
