"""Which held tasks no task will claim."""

from __future__ import annotations

from tests.support.allocator_builders import job
from tether.allocator.orphans import unclaimed


def test_a_gone_jobs_tasks_are_unclaimed_unless_they_have_a_record() -> None:
    assert unclaimed({0, 1, 2}, None, {1}) == [0, 2]


def test_a_deleting_jobs_tasks_without_a_record_are_unclaimed() -> None:
    assert unclaimed({0, 1}, job(deleting=True), set()) == [0, 1]


def test_tasks_within_the_count_are_claimed_even_without_a_record() -> None:
    # A Place that just committed: the scheduler writes their records next.
    assert unclaimed({0, 2, 3, 5}, job(count=3), {5}) == [3]
