"""Domain errors map to the gRPC status codes the scheduler acts on."""

from __future__ import annotations

import grpc
import pytest

from tether.allocator.errors import (
    CorruptRecord,
    InvalidRequest,
    JobDeleting,
    JobNotFound,
    StaleGeneration,
    TooManyConflicts,
    UnknownEntitlement,
)
from tether.allocator.servicer import status_of
from tether.store import CompactedError, StoreError, StoreUnavailable


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidRequest("bad handle"), grpc.StatusCode.INVALID_ARGUMENT),
        (JobNotFound("no job"), grpc.StatusCode.NOT_FOUND),
        (StaleGeneration("gen"), grpc.StatusCode.FAILED_PRECONDITION),
        (JobDeleting("deleting"), grpc.StatusCode.FAILED_PRECONDITION),
        (UnknownEntitlement("no ent"), grpc.StatusCode.FAILED_PRECONDITION),
        (TooManyConflicts("busy"), grpc.StatusCode.ABORTED),
        (CorruptRecord("bad json"), grpc.StatusCode.INTERNAL),
        (StoreUnavailable("down"), grpc.StatusCode.UNAVAILABLE),
        (CompactedError(1, 2), grpc.StatusCode.INTERNAL),
        (StoreError("odd"), grpc.StatusCode.INTERNAL),
        (RuntimeError("bug"), grpc.StatusCode.INTERNAL),
    ],
)
def test_status_of(error: Exception, code: grpc.StatusCode) -> None:
    assert status_of(error) is code
