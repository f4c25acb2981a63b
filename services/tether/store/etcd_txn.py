"""etcd transactions: the request for the protocol's compares and operations, the result, and
whether a transaction whose answer was lost may be sent again.

A transaction may be sent again when a second apply is impossible or changes nothing:
- it only reads;
- it only puts and deletes, without compares: applying it twice leaves the same state;
- it compares the mod revision, version or create revision of a key it puts or deletes (and
  deletes no prefix): once applied, that compare fails. If the second send fails, the first may
  have been the one that applied; the keys it writes then hold exactly what it wrote, at one
  revision newer than the compares expected, and it is reported as having succeeded.
Anything else (compares only on keys it does not write, writes in the failure branch, reads next
to writes, whose results could not be told again) is not sent again.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final

from aetcd import rpc

from tether.store.base import (
    Compare,
    CompareOp,
    CompareTarget,
    Delete,
    DeleteResult,
    Get,
    KeyValue,
    Op,
    OpResult,
    Put,
    PutResult,
    RangeResult,
    TxnResult,
    prefix_end,
)
from tether.store.etcd_streams import kv_of

_COMPARE_RESULT: Final = {
    CompareOp.EQUAL: rpc.Compare.EQUAL,
    CompareOp.NOT_EQUAL: rpc.Compare.NOT_EQUAL,
    CompareOp.GREATER: rpc.Compare.GREATER,
    CompareOp.LESS: rpc.Compare.LESS,
}
_COMPARE_TARGET: Final = {
    CompareTarget.VALUE: (rpc.Compare.VALUE, "value"),
    CompareTarget.VERSION: (rpc.Compare.VERSION, "version"),
    CompareTarget.CREATE_REVISION: (rpc.Compare.CREATE, "create_revision"),
    CompareTarget.MOD_REVISION: (rpc.Compare.MOD, "mod_revision"),
}
_REVISIONED: Final = frozenset(
    {CompareTarget.MOD_REVISION, CompareTarget.VERSION, CompareTarget.CREATE_REVISION}
)


class Resend(enum.Enum):
    """Whether, and how, a transaction may be sent again after its answer was lost."""

    NEVER = "never"
    READ = "read"
    BLIND = "blind"
    CAS = "cas"
    """A second apply fails a compare: a failed second send needs checking (`applied_before`)."""


def resend_of(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> Resend:
    if all(isinstance(op, Get) for op in (*success, *failure)):
        return Resend.READ
    if not all(isinstance(op, Get) for op in failure) or any(isinstance(op, Get) for op in success):
        return Resend.NEVER
    if not compares:
        return Resend.BLIND
    if any(isinstance(op, Delete) and op.prefix for op in success):
        return Resend.NEVER  # how much it deleted could not be told again
    written = _written_keys(success)
    if any(c.target in _REVISIONED and c.key in written for c in compares):
        return Resend.CAS
    return Resend.NEVER


def _written_keys(success: Sequence[Op]) -> set[str]:
    return {
        op.key
        for op in success
        if isinstance(op, Put) or (isinstance(op, Delete) and not op.prefix)
    }


def txn_request(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> Any:
    return rpc.TxnRequest(
        compare=[_compare(c) for c in compares],
        success=[_request_op(op) for op in success],
        failure=[_request_op(op) for op in failure],
    )


def txn_result(response: Any) -> TxnResult:
    revision = int(response.header.revision)
    results: list[OpResult] = []
    for item in response.responses:
        kind = item.WhichOneof("response")
        if kind == "response_range":
            results.append(RangeResult([kv_of(kv) for kv in item.response_range.kvs], revision))
        elif kind == "response_put":
            results.append(PutResult())
        else:
            results.append(DeleteResult(int(item.response_delete_range.deleted)))
    return TxnResult(bool(response.succeeded), revision, results)


def check_request(success: Sequence[Op]) -> Any:
    """A read of every key `success` writes, to tell whether it was applied (`applied_before`)."""
    return txn_request((), [Get(key) for key in _ordered_keys(success)], ())


def applied_before(
    compares: Sequence[Compare], success: Sequence[Op], check: TxnResult
) -> TxnResult | None:
    """The result of a CAS transaction as its first send applied it, judged from `check` (the
    answer to `check_request`): every key it puts holds what it put, all at one revision newer
    than any mod revision its compares expected, and every key it deletes is gone. None when the
    transaction was not applied. (Another writer making exactly the same change is taken for
    it: the state is what the transaction wanted either way.)"""
    found: dict[str, KeyValue | None] = {}
    for key, result in zip(_ordered_keys(success), check.results, strict=True):
        assert isinstance(result, RangeResult)
        found[key] = result.kvs[0] if result.kvs else None
    revisions = set()
    results: list[OpResult] = []
    for op in success:
        current = found[op.key]
        if isinstance(op, Put):
            if current is None or (current.value, current.lease) != (op.value, op.lease):
                return None
            revisions.add(current.mod_revision)
            results.append(PutResult())
        else:
            assert isinstance(op, Delete)
            if current is not None:
                return None
            results.append(DeleteResult(1))
    if len(revisions) > 1:
        return None
    revision = revisions.pop() if revisions else check.revision
    expected = [c.operand for c in compares if c.target is CompareTarget.MOD_REVISION]
    if any(isinstance(operand, int) and revision <= operand for operand in expected):
        return None
    return TxnResult(True, revision, results)


def _ordered_keys(success: Sequence[Op]) -> list[str]:
    return list(dict.fromkeys(op.key for op in success))


def _compare(compare: Compare) -> Any:
    target, field = _COMPARE_TARGET[compare.target]
    message = rpc.Compare(
        result=_COMPARE_RESULT[compare.op], target=target, key=compare.key.encode()
    )
    setattr(message, field, compare.operand)
    return message


def _request_op(op: Op) -> Any:
    if isinstance(op, Put):
        return rpc.RequestOp(
            request_put=rpc.PutRequest(key=op.key.encode(), value=op.value, lease=op.lease)
        )
    range_end = prefix_end(op.key) if op.prefix else b""
    if isinstance(op, Get):
        return rpc.RequestOp(
            request_range=rpc.RangeRequest(key=op.key.encode(), range_end=range_end)
        )
    assert isinstance(op, Delete)
    return rpc.RequestOp(
        request_delete_range=rpc.DeleteRangeRequest(key=op.key.encode(), range_end=range_end)
    )
