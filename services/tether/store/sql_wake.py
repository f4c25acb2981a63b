"""Wakes the SQL store's maintenance when the SQLite file is written, so an idle process need
not poll it: an inotify watch on the file's directory, for the file and its write-ahead log."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from inotify_simple import INotify, flags

from tether.aio import wait_set

_log = logging.getLogger(__name__)

_WRITES = flags.MODIFY | flags.CREATE | flags.MOVED_TO
"""A commit appends to the write-ahead log (created again after the last connection closed)."""


class FileWaker:
    """Sets an event whenever the SQLite file or its write-ahead log is written, by any process
    (this one included: a look then finds nothing new, which costs microseconds).

    The directory is watched rather than the files: SQLite deletes the log when its last
    connection closes and creates it anew, which a watch on the log itself would not survive."""

    def __init__(self, path: Path) -> None:
        self._names = {path.name, f"{path.name}-wal"}
        self._inotify = INotify(nonblocking=True)
        try:
            self._inotify.add_watch(path.parent, _WRITES)
        except OSError:
            self._inotify.close()
            raise
        self._written = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def open(cls, path: Path) -> FileWaker | None:
        """A waker of the file, or None where inotify is not to be had (no such system call,
        or the user's limit of instances or watches reached): the store polls then."""
        try:
            return cls(path)
        except OSError as error:
            _log.info("not watching %s for writes (%s): polling it", path, error)
            return None

    async def wait(self, timeout_s: float) -> bool:
        """Returns once the file was written since the last `wait`, or after `timeout_s`;
        whether it was written."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self._inotify.fileno(), self._drain)
        written = await wait_set(self._written, timeout_s)
        self._written.clear()
        return written

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._inotify.fileno())
        self._inotify.close()

    def _drain(self) -> None:
        events = self._inotify.read(timeout=0)
        # An overflowed queue lost events: take it for a write.
        if any(event.name in self._names or event.mask & flags.Q_OVERFLOW for event in events):
            self._written.set()
