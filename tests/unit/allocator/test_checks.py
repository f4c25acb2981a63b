"""The helpers the rules' checks are written with."""

from __future__ import annotations

import numpy as np
import pytest

from tether.allocator.rules.checks import member_of


@pytest.mark.parametrize("how_many", [0, 1, 3, 8, 9, 40])
def test_member_of_agrees_with_isin(how_many: int) -> None:
    rng = np.random.default_rng(how_many)
    # Codes of a column, NONE (-1) among them, as the index's int32 columns hold them.
    values = rng.integers(-1, 50, 500).astype(np.int32)
    codes = rng.choice(50, how_many, replace=False).tolist()
    mask = member_of(values, codes)
    assert mask.dtype == np.bool_
    assert mask.tolist() == np.isin(values, codes).tolist()
    assert mask.any() == bool(set(codes) & set(values.tolist()))
