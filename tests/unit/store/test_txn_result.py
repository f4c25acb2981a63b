"""Reading a transaction's results by what each operation was, not by digging in a list."""

from __future__ import annotations

import pytest

from tether.store import KeyValue
from tether.store.base import DeleteResult, PutResult, RangeResult, TxnResult

KV = KeyValue("a", b"1", 1, 2, 1)


def test_results_by_position() -> None:
    result = TxnResult(
        True, 5, [RangeResult([KV], 5), RangeResult([], 5), DeleteResult(3), PutResult()]
    )
    assert result.kv(0) == KV
    assert result.kvs(0) == [KV]
    assert result.kv(1) is None
    assert result.deleted(2) == 3


def test_asking_an_operation_for_what_it_did_not_do_names_it() -> None:
    result = TxnResult(True, 5, [PutResult(), DeleteResult(1)])
    with pytest.raises(TypeError, match="operation 0 of the transaction is not a Get"):
        result.kv(0)
    with pytest.raises(TypeError, match="operation 0 of the transaction is not a Delete"):
        result.deleted(0)
