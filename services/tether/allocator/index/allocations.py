"""Allocation keys (`allocations/<machine>` and its entries `.../<task id>`) applied to the
records and the held tasks, from the watch or a listing's page at once."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from tether.allocator.index.columns import Columns
from tether.allocator.index.records import FREE, Records, is_free
from tether.allocator.index.tasks import HeldTasks
from tether.store import KeyValue, keys

_log = logging.getLogger(__name__)


class AllocationKeys:
    """Applies allocation records and entries; records only move forward."""

    def __init__(self, columns: Columns, records: Records, tasks: HeldTasks) -> None:
        self._columns = columns
        self._records = records
        self._tasks = tasks

    def set_allocation(self, name: str, kv: KeyValue | None, revision: int) -> None:
        """Applies the key `allocations/<name>` as of `revision` (kv None: deleted then): a
        machine's allocation record (name: the machine id) or one of its entries (name:
        `<machine>/<task id>`).

        Records only move forward: a record older than the one held (a watch event arriving
        after the allocator's own commit) is ignored, so a row's revision and content always
        belong together, which the commit's compare relies on. Entries older than the row's
        record are ignored too; newer ones, or ones of the same transaction as the record, are
        applied, and applying an entry twice changes nothing.
        """
        machine_id, _, task_id = name.partition("/")
        row = self._columns.row(machine_id)
        held = int(self._columns.revision[row])
        if task_id:
            if (kv.mod_revision if kv else revision) >= held:
                self._set_entry(row, task_id, None if kv is None else kv.value)
            return
        if kv is None:
            if held and held < revision:
                self._records.set_header(row, FREE, 0)
                self._records.mark_readable(row, "", True)
            return
        if kv.mod_revision > held:
            self._records.apply(row, self._records.decode(row, kv.value), kv.mod_revision)

    def set_allocations(self, kvs: Sequence[KeyValue]) -> None:
        """Applies a page of a listing: free-pool records of rows without one only set their
        revision (in one assignment); other records go through `set_allocation`.

        Every entry listed is applied, however old: a listing is one snapshot, and an entry in
        it exists, even though its machine's record was written again since (a later commit on
        the machine). `set_allocation`'s rule for watch events would drop it."""
        columns = self._columns
        empty_rows: list[int] = []
        revisions: list[int] = []
        start = len(keys.ALLOCATIONS)
        for kv in kvs:
            name = kv.key[start:]
            machine_id, _, task_id = name.partition("/")
            if task_id:
                self._set_entry(columns.row(machine_id), task_id, kv.value)
                continue
            row = columns.row(name)
            if columns.revision[row]:
                self.set_allocation(name, kv, kv.mod_revision)
                continue
            header = self._records.decode(row, kv.value)
            if header is not None and is_free(header):
                empty_rows.append(row)
                revisions.append(kv.mod_revision)
            else:
                self._records.apply(row, header, kv.mod_revision)
        if empty_rows:
            columns.revision[empty_rows] = revisions

    def _set_entry(self, row: int, task_id: str, value: bytes | None) -> None:
        job, _, index_text = task_id.rpartition("/")
        try:
            index = int(index_text)
            if index < 0 or job.count("/") != 1:
                raise ValueError("malformed")
        except ValueError:
            _log.warning(
                "machine %s: ignoring allocation entry %r", self._columns.ids[row], task_id
            )
            return
        if value is None:
            self._tasks.remove(row, job, index)
            self._records.mark_readable(row, task_id, True)
            return
        if self._tasks.holds(row, job, index):
            return  # this allocator's own commit, or a listing after it
        try:
            shape = self._tasks.shape_of(value)
        except (ValueError, TypeError, AttributeError):
            # Unknown content: placing anything there could over-commit the machine.
            _log.warning(
                "machine %s: unreadable allocation entry %s", self._columns.ids[row], task_id
            )
            self._records.mark_readable(row, task_id, False)
            return
        self._records.mark_readable(row, task_id, True)
        self._tasks.add(row, sys.intern(job), index, shape)
