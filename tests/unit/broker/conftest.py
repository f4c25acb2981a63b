"""Fixtures of the broker's unit tests, from tests/support (a conftest makes them visible here)."""

from tests.support.cli import served as served
