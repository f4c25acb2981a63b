"""What an agent sees of one attempt in a pass: its start, progress and end, read from the
executor, and the stop it sends an attempt no longer wanted."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Final

from tether.agent.executor import Executor
from tether.agent.settings import AgentSettings
from tether.agent.status import Attempt, StatusReport
from tether.agent.workdir import ShimExit
from tether.model import Assignment, DesiredState, TaskState

_log = logging.getLogger(__name__)

KILL_BACKSTOP_S: Final = 5.0
"""Extra time, after the shim's own SIGKILL, before the agent kills an unresponsive shim."""


class NeverRan:
    """An adopted attempt that never ran: the agent forgets it and starts it again as new."""


NEVER_RAN: Final = NeverRan()


class Observer:
    """Looks at attempts through the agent's executor."""

    def __init__(self, executor: Executor, settings: AgentSettings) -> None:
        self._executor = executor
        self._settings = settings

    def observe(
        self, attempt: Attempt, assignment: Assignment | None
    ) -> StatusReport | NeverRan | None:
        """Notices the attempt's start and end, and stops it when it is no longer wanted;
        returns the status to report (None: nothing to report yet; NEVER_RAN: forget it)."""
        files = attempt.files
        end = self._executor.end(files)
        if attempt.state is None or attempt.state.pid is None:
            # Read after the end, which the shim writes last: a finished attempt's state is
            # final. This is the observation's only read of the state.
            attempt.state = self._executor.state(files) or attempt.state
        if end is not None:
            return self._ended(attempt, end)
        shim_running = self._executor.supervised(files, attempt.state, attempt.seen_at)
        wanted = (
            assignment is not None
            and assignment.attempt == attempt.number
            and assignment.desired is DesiredState.RUNNING
        )
        if not wanted:
            self._stop(attempt)
        if not shim_running:
            if attempt.adopted and attempt.state is None and self._executor.end(files) is None:
                # The previous agent died between claiming the attempt and its shim's first
                # step (the shim records its state before it starts anything): nothing ran,
                # and it starts again in this pass rather than being reported failed.
                return NEVER_RAN
            return self._ended(attempt, self._shim_died(attempt))
        if attempt.state is None or attempt.state.pid is None:
            return None
        if attempt.progress is None and wanted and assignment is not None:
            attempt.progress = assignment.progress  # adopted: resumed from there
        if time.monotonic() - attempt.progress_read_at >= self._settings.progress_interval_s:
            self._read_progress(attempt)
        return StatusReport(attempt, TaskState.RUNNING, True)

    def _stop(self, attempt: Attempt) -> None:
        """Asks the shim to stop the task; kills both when the shim does not manage to."""
        now = time.monotonic()
        if attempt.stop_sent_at is None:
            attempt.stop_sent_at = now
            _log.info("stopping attempt %d of task %s", attempt.number, attempt.task.task_id)
            self._executor.stop(attempt.files, attempt.state, force=False)
        elif now - attempt.stop_sent_at > self._settings.kill_grace_s + KILL_BACKSTOP_S:
            self._executor.stop(attempt.files, attempt.state, force=True)

    def _shim_died(self, attempt: Attempt) -> ShimExit:
        """The end of an attempt whose shim is gone."""
        # The shim records the end before it exits: look again, it may have just done so.
        end = self._executor.end(attempt.files)
        if end is None:
            self._executor.orphaned(attempt.state)
            end = ShimExit(
                exit_code=None,
                stopped=attempt.stop_sent_at is not None,
                finished_at=datetime.now(UTC),
                message="the task's supervisor (shim) ended without recording the exit status",
            )
            self._executor.record_end(attempt.files, end)
        return end

    def _read_progress(self, attempt: Attempt) -> None:
        """The steps the task reports now, if it reports any."""
        reported = self._executor.progress(attempt.files)
        if reported is not None:
            attempt.progress = reported
        attempt.progress_read_at = time.monotonic()

    def _ended(self, attempt: Attempt, end: ShimExit) -> StatusReport:
        """The report of an attempt's end."""
        self._read_progress(attempt)
        if end.stopped or attempt.stop_sent_at is not None:
            state = TaskState.KILLED
        elif end.exit_code == 0:
            state = TaskState.EXITED
        else:
            state = TaskState.FAILED
        fields = {
            "exit_code": end.exit_code,
            "finished_at": end.finished_at,
            "message": end.message,
        }
        return StatusReport(attempt, state, False, fields)
