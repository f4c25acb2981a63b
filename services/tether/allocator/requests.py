"""What a request to the allocator names, read and checked: the job, its entitlement and the
task indexes (errors name what is wrong)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from pydantic import ValidationError

from tether.allocator.errors import CorruptRecord, InvalidRequest, JobNotFound, UnknownEntitlement
from tether.allocator.index import AllocationIndex
from tether.model import Entitlement, Job, from_json, parse_job_handle, problems_text
from tether.store import Store, keys


class JobReader:
    """Reads the job a request names from the store, and its entitlement from the index."""

    def __init__(self, store: Store, index: AllocationIndex) -> None:
        self._store = store
        self._index = index

    async def job(self, job_handle: str) -> Job:
        entitlement_name, job_name = parse_handle(job_handle)
        kv = await self._store.get(keys.job(entitlement_name, job_name))
        if kv is None:
            raise JobNotFound(f"job {job_handle} not found")
        try:
            return from_json(Job, kv.value, stored=True)
        except ValidationError as error:
            raise CorruptRecord(
                f"the record of job {job_handle} is not valid: {problems_text(error)}"
            ) from None

    async def entitlement(self, job: Job) -> Entitlement:
        name = job.spec.entitlement
        known = self._index.entitlement(name)
        if known is not None:
            return known
        # The feed may not have seen an entitlement created a moment ago.
        kv = await self._store.get(keys.entitlement(name))
        if kv is None:
            raise UnknownEntitlement(f"entitlement {name} of job {job.handle} does not exist")
        try:
            return from_json(Entitlement, kv.value, stored=True)
        except ValidationError as error:
            raise CorruptRecord(
                f"the record of entitlement {name} is not valid: {problems_text(error)}"
            ) from None


def parse_handle(job_handle: str) -> tuple[str, str]:
    """(entitlement, job name) of `<entitlement>/<job>`; InvalidRequest if it is not one."""
    try:
        return parse_job_handle(job_handle)
    except ValueError as error:
        raise InvalidRequest(str(error)) from None


def check_unique(indexes: Sequence[int]) -> None:
    repeated = sorted(index for index, seen in Counter(indexes).items() if seen > 1)
    if repeated:
        raise InvalidRequest(f"task indexes {_listed(repeated)} are given more than once")


def check_in_range(job: Job, indexes: Sequence[int]) -> None:
    too_high = [index for index in indexes if index >= job.spec.count]
    if too_high:
        raise InvalidRequest(
            f"task indexes {_listed(too_high)} are out of range: job {job.handle} has "
            f"{job.spec.count} tasks (0 to {job.spec.count - 1})"
        )


def _listed(indexes: Sequence[int]) -> str:
    return ", ".join(map(str, indexes))
