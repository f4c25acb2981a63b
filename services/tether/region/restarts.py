"""When `tether up` starts a dead service again: like systemd's `Restart=on-failure` with a start
limit, decided from the exit alone so that it can be tested without processes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    """Backoff between restarts, and when to give up on a service that keeps failing."""

    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    fast_s: float = 10.0
    """A process that dies sooner than this after it started failed fast."""
    give_up_after: int = 5
    """Fast failures in a row after which the service is left dead."""


@dataclass(frozen=True)
class Verdict:
    restart_in_s: float | None
    """When to start it again; None: leave it dead."""
    fast_failures: int
    """Fast failures in a row, this one included."""
    why: str
    """What to tell the operator."""


def after_exit(policy: RestartPolicy, exit_code: int, ran_s: float, fast_failures: int) -> Verdict:
    """What to do about a service that exited with `exit_code` after running `ran_s` seconds,
    having failed fast `fast_failures` times in a row before. A clean exit (code 0: someone
    stopped it on purpose) is left alone; a failure is restarted after a backoff that doubles
    with every fast failure in a row, until `give_up_after` of them."""
    if exit_code == 0:
        return Verdict(None, 0, "it exited cleanly; not restarted")
    failures = fast_failures + 1 if ran_s < policy.fast_s else 0
    if failures >= policy.give_up_after:
        return Verdict(
            None,
            failures,
            f"it failed {failures} times in a row within {policy.fast_s:g}s of starting; "
            "not restarted again (fix the cause, then restart the region)",
        )
    delay = min(policy.backoff_initial_s * 2**failures, policy.backoff_max_s)
    return Verdict(delay, failures, f"restarting it in {delay:g}s")
