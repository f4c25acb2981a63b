"""The gRPC face of the allocator: converts messages and maps domain errors to status codes."""

from __future__ import annotations

from typing import Final, NoReturn, TypeVar

import grpc
from pydantic import ValidationError

from tether.allocator.engine import Engine
from tether.allocator.errors import (
    AllocatorError,
    CorruptRecord,
    InvalidRequest,
    JobNotFound,
    PreconditionFailed,
    TooManyConflicts,
)
from tether.allocator.preemption import PreemptionCandidate
from tether.model import from_json, problems_text
from tether.model.ephemeral import EphemeralResource
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.service import grpc_abort, grpc_status_of
from tether.store import StoreError, StoreUnavailable

_MAX_UINT64 = 2**64 - 1
"""Effective preference weights grow fast; the message field is 64 bits."""

Request = TypeVar("Request")
Response = TypeVar("Response")

STATUS_CODES: Final[dict[type[Exception], grpc.StatusCode]] = {
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    JobNotFound: grpc.StatusCode.NOT_FOUND,
    # StaleGeneration, JobDeleting and UnknownEntitlement.
    PreconditionFailed: grpc.StatusCode.FAILED_PRECONDITION,
    TooManyConflicts: grpc.StatusCode.ABORTED,
    CorruptRecord: grpc.StatusCode.INTERNAL,
    # The scheduler tries another replica on UNAVAILABLE; one that reaches the store may succeed.
    StoreUnavailable: grpc.StatusCode.UNAVAILABLE,
    StoreError: grpc.StatusCode.INTERNAL,
}
"""The status of each domain error; the most specific class in an error's MRO wins."""


def status_of(error: Exception) -> grpc.StatusCode:
    """The gRPC status code for `error`: INTERNAL for anything unexpected."""
    return grpc_status_of(error, STATUS_CODES)


async def _abort(
    context: grpc.aio.ServicerContext[Request, Response], error: Exception
) -> NoReturn:
    await grpc_abort(context, error, STATUS_CODES, (AllocatorError, StoreError))


class AllocatorServicer(allocator_pb2_grpc.AllocatorServicer):
    """tether.allocator.v1.Allocator over an `Engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def Place(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.PlaceRequest,
        context: grpc.aio.ServicerContext[pb.PlaceRequest, pb.PlaceResponse],
    ) -> pb.PlaceResponse:
        try:
            result = await self._engine.place(
                request.job_handle,
                list(request.task_indexes),
                request.job_generation,
                request.request_id,
                dict(request.preferred_machines),
            )
        except Exception as error:
            await _abort(context, error)
        return pb.PlaceResponse(
            placements=[pb.Placement(task_index=i, machine_id=m) for i, m in result.placements],
            unplaced=[pb.UnplacedTask(task_index=i, reason=r) for i, r in result.unplaced],
            attempts=result.attempts,
            conflicts=result.conflicts,
        )

    async def Release(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.ReleaseRequest,
        context: grpc.aio.ServicerContext[pb.ReleaseRequest, pb.ReleaseResponse],
    ) -> pb.ReleaseResponse:
        try:
            released = await self._engine.release(
                request.job_handle,
                list(request.task_indexes),
                return_emptied=request.return_emptied_machines,
            )
        except Exception as error:
            await _abort(context, error)
        return pb.ReleaseResponse(released=released)

    async def CheckPreemption(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.CheckPreemptionRequest,
        context: grpc.aio.ServicerContext[pb.CheckPreemptionRequest, pb.CheckPreemptionResponse],
    ) -> pb.CheckPreemptionResponse:
        try:
            choice = await self._engine.questions.check_preemption(
                request.job_handle,
                list(request.task_indexes),
                [
                    PreemptionCandidate(tasks.job_handle, tasks.from_index, tasks.tier)
                    for tasks in request.candidates
                ],
                request.max_tasks,
            )
        except Exception as error:
            await _abort(context, error)
        return pb.CheckPreemptionResponse(
            fits=choice.fits, chosen=list(choice.chosen), reason=choice.reason
        )

    async def Suggest(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.SuggestRequest,
        context: grpc.aio.ServicerContext[pb.SuggestRequest, pb.SuggestResponse],
    ) -> pb.SuggestResponse:
        try:
            indexes = list(request.task_indexes)
            suggestion = await self._engine.questions.suggest(request.job_handle, indexes)
        except Exception as error:
            await _abort(context, error)
        return pb.SuggestResponse(
            placements=[
                pb.Placement(task_index=i, machine_id=suggestion.machines[i])
                for i in indexes
                if i in suggestion.machines
            ],
            unplaced=[
                pb.UnplacedTask(task_index=i, reason=suggestion.unplaced[i])
                for i in indexes
                if i in suggestion.unplaced
            ],
        )

    async def Explain(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.ExplainRequest,
        context: grpc.aio.ServicerContext[pb.ExplainRequest, pb.ExplainResponse],
    ) -> pb.ExplainResponse:
        try:
            result = await self._engine.questions.explain(request.job_handle)
        except Exception as error:
            await _abort(context, error)
        return pb.ExplainResponse(
            job_handle=request.job_handle,
            machines_considered=result.considered,
            machines_fitting=result.fitting,
            entitlement_machines=result.entitlement_machines,
            rules=[
                pb.RuleResult(rule=o.rule, machines_rejected=o.rejected, detail=o.detail)
                for o in result.outcomes
            ],
            preferences=[
                pb.PreferenceResult(
                    rule=p.rule, weight=min(p.weight, _MAX_UINT64), machines_matching=p.matching
                )
                for p in result.preferences
            ],
            chosen_machines=[
                pb.ChosenMachine(
                    machine_id=c.machine,
                    task_indexes=c.tasks,
                    rank=c.rank,
                    preferences=c.preferences,
                )
                for c in result.chosen
            ],
            summary=result.summary,
        )

    async def EphemeralState(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.EphemeralStateRequest,
        context: grpc.aio.ServicerContext[pb.EphemeralStateRequest, pb.EphemeralStateResponse],
    ) -> pb.EphemeralStateResponse:
        try:
            records = [_ephemeral_record(request.entitlement, value) for value in request.records]
            labels = await self._engine.questions.ephemeral_state(
                request.entitlement,
                records,
                over_held=request.over_held,
                min_revision=request.min_revision,
                limit=request.limit,
            )
        except Exception as error:
            await _abort(context, error)
        return pb.EphemeralStateResponse(
            labels=[
                pb.EphemeralLabel(
                    label=state.label,
                    machines=[
                        pb.EphemeralMachine(
                            machine_id=share.machine,
                            capacity=share.capacity,
                            held=share.held,
                            tasks=share.tasks,
                        )
                        for share in state.machines
                    ],
                    truncated=state.truncated,
                )
                for state in labels
            ]
        )


def _ephemeral_record(entitlement: str, value: bytes) -> EphemeralResource:
    try:
        record = from_json(EphemeralResource, value)
    except ValidationError as error:
        raise InvalidRequest(f"not an ephemeral resource: {problems_text(error)}") from None
    if record.entitlement != entitlement:
        raise InvalidRequest(
            f"ephemeral resource {record.entitlement}/{record.label} is not of entitlement "
            f"{entitlement}"
        )
    return record
