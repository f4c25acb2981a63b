"""Which etcd transactions may be sent again after a lost answer, and how a failed second send
of a compare-and-swap is told apart from one whose first send applied."""

from __future__ import annotations

import pytest

from tether.store import Compare, Delete, Get, KeyValue, Op, Put, key_missing, mod_revision_is
from tether.store.base import (
    CompareOp,
    CompareTarget,
    DeleteResult,
    PutResult,
    RangeResult,
    TxnResult,
)
from tether.store.etcd_txn import Resend, applied_before, resend_of

FENCE = Compare("/leader", CompareTarget.VALUE, CompareOp.EQUAL, b"me")


@pytest.mark.parametrize(
    ("compares", "success", "failure", "expected"),
    [
        ([], [Get("/a")], [], Resend.READ),
        ([FENCE], [Get("/a", prefix=True)], [Get("/b")], Resend.READ),
        ([], [Put("/a", b"1"), Delete("/b", prefix=True)], [], Resend.BLIND),
        ([key_missing("/a")], [Put("/a", b"1")], [Get("/a")], Resend.CAS),
        ([FENCE, mod_revision_is("/a", 7)], [Delete("/a")], [], Resend.CAS),
        # Compares only on keys it does not write: a second apply would succeed again.
        ([FENCE], [Put("/a", b"1")], [], Resend.NEVER),
        # A write in the failure branch, a read next to writes, a prefix deleted under a CAS.
        ([key_missing("/a")], [Put("/a", b"1")], [Put("/b", b"2")], Resend.NEVER),
        ([key_missing("/a")], [Put("/a", b"1"), Get("/c")], [], Resend.NEVER),
        ([key_missing("/a")], [Put("/a", b"1"), Delete("/p/", prefix=True)], [], Resend.NEVER),
    ],
)
def test_resend_policy(
    compares: list[Compare],
    success: list[Put | Delete | Get],
    failure: list[Put | Get],
    expected: Resend,
) -> None:
    assert resend_of(compares, success, failure) is expected


def check(*found: KeyValue | None, revision: int = 50) -> TxnResult:
    """What `check_request` answers: one range result per written key."""
    return TxnResult(True, revision, [RangeResult([kv] if kv else [], revision) for kv in found])


def kv(key: str, value: bytes, mod_revision: int, lease: int = 0) -> KeyValue:
    return KeyValue(key, value, 3, mod_revision, 1, lease)


CAS = [mod_revision_is("/a", 7)]
WRITES: list[Op] = [Put("/a", b"new"), Delete("/b")]


def test_a_first_send_that_applied_is_reported_as_it_succeeded() -> None:
    result = applied_before(CAS, WRITES, check(kv("/a", b"new", 42), None))
    assert result == TxnResult(True, 42, [PutResult(), DeleteResult(1)])


@pytest.mark.parametrize(
    "found",
    [
        (kv("/a", b"other", 42), None),  # someone else's value
        (kv("/a", b"new", 42, lease=9), None),  # not on the lease it was put with
        (kv("/a", b"new", 42), kv("/b", b"still", 40)),  # the delete did not happen
        (kv("/a", b"new", 7), None),  # unchanged since the revision the compare expected
    ],
)
def test_a_transaction_that_did_not_apply_is_left_failed(
    found: tuple[KeyValue | None, ...],
) -> None:
    assert applied_before(CAS, WRITES, check(*found)) is None


def test_puts_at_different_revisions_were_not_one_transaction() -> None:
    writes: list[Op] = [Put("/a", b"1"), Put("/b", b"2")]
    assert applied_before(CAS, writes, check(kv("/a", b"1", 42), kv("/b", b"2", 43))) is None
