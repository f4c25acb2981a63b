"""The region most end-to-end modules share: `tether up` with four agents, once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.harness import LocalRegion


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    running = LocalRegion(tmp_path_factory.mktemp("region") / "tether")
    try:
        running.start()
        yield running
    finally:
        running.cleanup()
