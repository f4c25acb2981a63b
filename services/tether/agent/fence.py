"""The fence of at-most-once attempts: which of them may run on this machine, and until when."""

from __future__ import annotations

import logging

from tether.agent.executor import Executor
from tether.agent.workdir import AttemptFiles
from tether.store.lease import LeaseKeeper

_log = logging.getLogger(__name__)


class AttemptFence:
    """The at-most-once attempts that may run, until a deadline each renewal of the agent's lease
    moves by the region's fencing period; the executor writes it where the shims read it.

    From the moment a machine's heartbeat is gone, the scheduler may take its at-most-once tasks
    elsewhere once the fencing period is over, and only while the heartbeat stays gone. So the
    fence follows one lease: the one registered before the attempts it holds were checked
    against the store (`hold`). Should the fence not be written, it expires on its own: the
    attempts stop, and nothing runs twice.
    """

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self.fencing_s = 0.0
        """The region's fencing period, which the agent reads at its start."""
        self._held: set[AttemptFiles] = set()
        self._lease = 0
        """The lease whose renewals extend the fence."""
        self._until = 0.0

    def hold(self, attempts: set[AttemptFiles], keeper: LeaseKeeper) -> None:
        """Holds just `attempts`, under `keeper`'s lease, from its last renewal on."""
        self._held = attempts
        self._lease = keeper.lease
        self._until = keeper.renewed_at + self.fencing_s
        self._write()

    def add(self, files: AttemptFiles) -> None:
        """Holds one more attempt, about to start."""
        self._held.add(files)
        self._write()

    def discard(self, files: AttemptFiles) -> None:
        """Lets go of an attempt that ended."""
        self._held.discard(files)

    def renewed(self, lease: int, renewed_at: float) -> None:
        """A renewal of `lease` at `renewed_at` (monotonic): extends the fence if it follows it."""
        if lease == self._lease:
            self._until = renewed_at + self.fencing_s
            # A fence that holds nothing needs no new deadline: it is written again as soon as
            # it holds an attempt.
            if self._held:
                self._write()

    def follows(self, keeper: LeaseKeeper | None) -> bool:
        """Whether new at-most-once attempts may start: the fence follows `keeper`'s live lease."""
        return keeper is not None and not keeper.lost.is_set() and keeper.lease == self._lease

    def _write(self) -> None:
        try:
            self._executor.fence(self._held, self._until)
        except OSError as error:
            _log.error("cannot write the fence of at-most-once tasks: %s", error)
