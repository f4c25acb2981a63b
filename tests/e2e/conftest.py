"""The region most end-to-end modules share: `tether up` with four agents, once per module, in
a `.tether` directory beside `examples`, as the README's tour runs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.harness import LocalRegion
from tests.support.readme import make_home


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegion]:
    running = LocalRegion(make_home(tmp_path_factory.mktemp("region")))
    try:
        running.start()
        yield running
    finally:
        running.cleanup()
