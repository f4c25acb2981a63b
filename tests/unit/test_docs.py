"""The docs name what the code has: every key prefix, and the limits etcd must run with."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tether.store import keys
from tether.store.etcd_server import (
    ETCD_MAX_REQUEST_BYTES,
    ETCD_MAX_TXN_OPS,
    ETCD_QUOTA_BACKEND_BYTES,
)

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PROTOCOL = ROOT / "docs" / "protocol.md"
DEPLOY = ROOT / "deploy" / "README.md"


def _section(path: Path, heading: str) -> str:
    """The text under `heading` up to the next heading of any level."""
    text = path.read_text()
    start = text.index(heading + "\n") + len(heading)
    following = re.search(r"^#", text[start:], re.MULTILINE)
    return text[start : start + following.start()] if following else text[start:]


@pytest.mark.parametrize("prefix", keys.ALL_PREFIXES)
def test_every_prefix_is_in_the_keyspace_and_the_table_of_writers(prefix: str) -> None:
    assert prefix in _section(ARCHITECTURE, "### Keyspace")
    relative = prefix.removeprefix(keys.ROOT)
    rows = [
        line
        for line in _section(PROTOCOL, "## Who writes what").splitlines()
        if line.startswith(f"| `{relative}")
    ]
    assert rows, f"protocol.md's table has no row for {relative}"


@pytest.mark.parametrize("doc", [ARCHITECTURE, DEPLOY], ids=lambda path: path.name)
@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-txn-ops", ETCD_MAX_TXN_OPS),
        ("--max-request-bytes", ETCD_MAX_REQUEST_BYTES),
        ("--quota-backend-bytes", ETCD_QUOTA_BACKEND_BYTES),
    ],
)
def test_the_etcd_limits_are_the_ones_the_local_etcd_runs_with(
    doc: Path, flag: str, value: int
) -> None:
    named = re.findall(rf"{flag}=(\d+)", doc.read_text())
    assert named, f"{doc.name} does not name {flag}"
    assert {int(number) for number in named} == {value}
