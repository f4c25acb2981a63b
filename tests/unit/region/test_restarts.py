"""When `tether up` restarts a dead service: backoff, fast failures, giving up."""

from __future__ import annotations

from tether.region.restarts import RestartPolicy, after_exit

POLICY = RestartPolicy(backoff_initial_s=0.5, backoff_max_s=4.0, fast_s=10.0, give_up_after=5)


def test_a_clean_exit_is_left_alone() -> None:
    verdict = after_exit(POLICY, 0, ran_s=1.0, fast_failures=3)
    assert verdict.restart_in_s is None
    assert "cleanly" in verdict.why


def test_fast_failures_back_off_doubling_up_to_the_maximum_then_give_up() -> None:
    delays = []
    failures = 0
    for _ in range(4):
        verdict = after_exit(POLICY, -9, ran_s=1.0, fast_failures=failures)
        failures = verdict.fast_failures
        delays.append(verdict.restart_in_s)
    assert delays == [1.0, 2.0, 4.0, 4.0]
    last = after_exit(POLICY, 1, ran_s=1.0, fast_failures=failures)
    assert (last.restart_in_s, last.fast_failures) == (None, 5)
    assert last.why.startswith("it failed 5 times in a row within 10s of starting")


def test_a_service_that_ran_a_while_starts_counting_again() -> None:
    verdict = after_exit(POLICY, -9, ran_s=60.0, fast_failures=4)
    assert (verdict.restart_in_s, verdict.fast_failures) == (0.5, 0)
