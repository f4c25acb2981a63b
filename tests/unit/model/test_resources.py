"""Properties of Resources arithmetic: exact, never negative, never past MAX_QUANTITY."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.model import (
    MAX_QUANTITY,
    ZERO,
    InsufficientResources,
    ResourceOverflow,
    Resources,
)

EXTRA_NAMES = st.sampled_from(["fpga", "ssd", "tpu-v4", "nic-100g"])


def resources(max_value: int = MAX_QUANTITY) -> st.SearchStrategy[Resources]:
    # Small values make dimensions collide and fit/not-fit both likely; the full range exercises
    # the bounds.
    amount = st.one_of(st.integers(0, 8), st.integers(0, max_value))
    return st.builds(
        Resources,
        cpu=amount,
        memory_mib=amount,
        disk_gib=amount,
        gpus=amount,
        extra=st.dictionaries(EXTRA_NAMES, amount, max_size=3),
    )


def amounts(r: Resources) -> dict[str, int]:
    """Every dimension by the label messages and exceptions use."""
    dims = {"cpu": r.cpu, "memory": r.memory_mib, "disk": r.disk_gib, "gpus": r.gpus}
    dims.update({f"extra/{name}": amount for name, amount in r.extra.items()})
    return dims


def exceeding(a: Resources, b: Resources) -> set[str]:
    """Dimensions where a has more than b."""
    x, y = amounts(a), amounts(b)
    return {label for label in x.keys() | y.keys() if x.get(label, 0) > y.get(label, 0)}


def overflowing(a: Resources, b: Resources) -> set[str]:
    x, y = amounts(a), amounts(b)
    return {
        label for label in x.keys() | y.keys() if x.get(label, 0) + y.get(label, 0) > MAX_QUANTITY
    }


FAST = settings(max_examples=100, deadline=None)


@FAST
@given(resources(MAX_QUANTITY // 2), resources(MAX_QUANTITY // 2))
def test_adding_then_subtracting_gives_back_the_original(a: Resources, b: Resources) -> None:
    assert a + b - b == a


@FAST
@given(resources(), resources())
def test_fits_in_iff_subtraction_succeeds(a: Resources, capacity: Resources) -> None:
    try:
        capacity - a
    except InsufficientResources:
        subtracted = False
    else:
        subtracted = True
    assert a.fits_in(capacity) is subtracted


@FAST
@given(resources(), resources())
def test_subtraction_never_goes_negative(a: Resources, b: Resources) -> None:
    short = exceeding(b, a)
    if short:
        with pytest.raises(InsufficientResources) as raised:
            a - b
        assert set(raised.value.dimensions) == short
        for label in short:
            assert label in str(raised.value)
    else:
        x, y = amounts(a), amounts(b)
        expected = {label: x.get(label, 0) - y.get(label, 0) for label in x.keys() | y.keys()}
        assert amounts(a - b) == {
            label: amount
            for label, amount in expected.items()
            if amount or not label.startswith("extra/")
        }


@FAST
@given(resources(), resources())
def test_addition_raises_instead_of_passing_max_quantity(a: Resources, b: Resources) -> None:
    over = overflowing(a, b)
    if over:
        with pytest.raises(ResourceOverflow) as raised:
            a + b
        assert set(raised.value.dimensions) == over
    else:
        total = a + b
        x, y = amounts(a), amounts(b)
        assert amounts(total) == {label: x.get(label, 0) + y.get(label, 0) for label in x | y}


@FAST
@given(resources(), resources())
def test_shortfall_is_empty_iff_it_fits(a: Resources, capacity: Resources) -> None:
    shortfall = a.shortfall(capacity)
    assert (shortfall == []) is a.fits_in(capacity)
    assert [line.split(":")[0] for line in shortfall] == [
        label for label in amounts(a) if label in exceeding(a, capacity)
    ]


@FAST
@given(resources())
def test_zero_is_the_identity(a: Resources) -> None:
    assert a + ZERO == a
    assert a - ZERO == a
    assert ZERO.fits_in(a)
    assert (a - a).is_zero()
    assert a.is_zero() is (a == ZERO)


def test_shortfall_names_dimension_need_and_free_amount() -> None:
    need = Resources(cpu=500, memory_mib=2048, gpus=2, extra={"fpga": 1})
    capacity = Resources(cpu=4000, memory_mib=1024, gpus=1)
    assert need.shortfall(capacity) == [
        "memory: need 2048 MiB, 1024 free",
        "gpus: need 2, 1 free",
        "extra/fpga: need 1, 0 free",
    ]
    assert Resources(cpu=2000, disk_gib=10).shortfall(Resources(cpu=1000)) == [
        "cpu: need 2000 millicores, 1000 free",
        "disk: need 10 GiB, 0 free",
    ]


def test_insufficient_resources_message_lists_the_shortfall() -> None:
    with pytest.raises(InsufficientResources, match=r"memory: need 2048 MiB, 1024 free") as raised:
        Resources(memory_mib=1024) - Resources(memory_mib=2048)
    assert raised.value.dimensions == ["memory"]


def test_missing_extra_key_in_capacity_counts_as_zero() -> None:
    assert not Resources(extra={"ssd": 1}).fits_in(Resources(cpu=10**6))
    assert Resources(extra={"ssd": 1}).fits_in(Resources(extra={"ssd": 1, "fpga": 2}))


def test_zero_extra_keys_are_dropped_so_equality_is_canonical() -> None:
    with_zero = Resources(cpu=1, extra={"ssd": 0, "fpga": 2})
    assert with_zero.extra == {"fpga": 2}
    assert with_zero == Resources(cpu=1, extra={"fpga": 2})
    assert (Resources(extra={"ssd": 3}) - Resources(extra={"ssd": 3})).extra == {}


def test_both_errors_are_value_errors() -> None:
    assert issubclass(InsufficientResources, ValueError)
    assert issubclass(ResourceOverflow, ValueError)


def test_max_quantity_is_reachable_but_not_passable() -> None:
    assert (Resources(gpus=MAX_QUANTITY - 1) + Resources(gpus=1)).gpus == MAX_QUANTITY
    with pytest.raises(ResourceOverflow, match="gpus"):
        Resources(gpus=MAX_QUANTITY) + Resources(gpus=1)
    with pytest.raises(ResourceOverflow, match="extra/ssd"):
        Resources(extra={"ssd": MAX_QUANTITY}) + Resources(extra={"ssd": 1})


@FAST
@given(
    cpu=st.integers(0, 10_000),
    memory=st.integers(0, 10_000),
    tpu=st.integers(0, 10_000),
    count=st.integers(min_value=0, max_value=300),
)
def test_times_count_is_repeated_addition(cpu: int, memory: int, tpu: int, count: int) -> None:
    resources = Resources(cpu=cpu, memory_mib=memory, extra={"tpu": tpu})
    expected = ZERO
    for _ in range(count):
        expected = expected + resources
    assert resources * count == expected


def test_times_count_overflows_like_addition() -> None:
    with pytest.raises(ResourceOverflow) as caught:
        Resources(cpu=MAX_QUANTITY // 2 + 1) * 2
    assert caught.value.dimensions == ["cpu"]
    assert Resources(cpu=1) * MAX_QUANTITY == Resources(cpu=MAX_QUANTITY)
    with pytest.raises(ValueError, match="negative"):
        Resources(cpu=1) * -1
