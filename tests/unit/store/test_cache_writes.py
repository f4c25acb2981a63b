"""What a frontend remembers of its own writes (`store.cache.Writes`): the newest revision
under each prefix a copy can have, and no deeper."""

from __future__ import annotations

from tether.store import Delete, Get, Put, keys
from tether.store.cache import Writes


def test_a_write_is_remembered_under_the_prefixes_a_copy_can_have() -> None:
    writes = Writes()
    writes.note([Put(keys.task("team-a", "web", 3), b"{}"), Get(keys.job("team-b", "x"))], 7)
    writes.note([Delete(keys.job("team-a", "web"))], 9)
    assert writes.newest == 9
    assert writes.newest_under(keys.TASKS) == 7
    assert writes.newest_under(keys.TASKS + "team-a/") == 7
    assert writes.newest_under(keys.JOBS + "team-a/") == 9
    # A read is not a write, and a job's own prefix is deeper than any copy's.
    assert writes.newest_under(keys.JOBS + "team-b/") == 0
    assert writes.newest_under(keys.tasks_of("team-a", "web")) == 0


def test_an_older_write_does_not_lower_what_is_remembered() -> None:
    writes = Writes()
    writes.note([Put(keys.job("team-a", "web"), b"{}")], 9)
    writes.note([Put(keys.job("team-a", "web"), b"{}")], 4)
    assert (writes.newest, writes.newest_under(keys.JOBS)) == (9, 9)
