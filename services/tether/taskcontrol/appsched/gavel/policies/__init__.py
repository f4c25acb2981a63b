"""Gavel's policies: pure functions from a `Problem` to an `Allocation` (`registry.POLICIES`)."""
