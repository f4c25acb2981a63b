"""Hand-built machines, jobs and entitlements for the allocator's tests, and a storeless region."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from tether.allocator.cache import ChoiceCache
from tether.allocator.explain import Explanation, explain
from tether.allocator.group_commit import place_tentatively
from tether.allocator.index import AllocationIndex
from tether.allocator.placement import Choice, Planner
from tether.model import (
    Allocation,
    Entitlement,
    Job,
    JobSpec,
    Machine,
    MachineState,
    Placement,
    Quota,
    Resources,
    TaskTemplate,
    Topology,
    from_json,
    to_json,
)
from tether.model.ephemeral import EphemeralResource
from tether.model.machine import Harvest
from tether.store import KeyValue, Store, keys

BIG = 10**9
REGION_MSBS = 4
"""Machines of the allocator integration tests' region, one per MSB."""


def machine(
    machine_id: str,
    *,
    dc: str = "dc1",
    msb: str = "msb1",
    rack: str = "r1",
    memory: int = 4096,
    cpu: int = 4000,
    disk: int = 0,
    gpus: int = 0,
    extra: dict[str, int] | None = None,
    state: MachineState = MachineState.UP,
    hardware: str = "std",
    attributes: dict[str, str] | None = None,
    profile: str | None = None,
    harvest: Harvest | None = None,
) -> Machine:
    return Machine(
        id=machine_id,
        hostname=f"{machine_id}.example",
        topology=Topology(region="r", dc=dc, msb=msb, rack=rack),
        hardware_type=hardware,
        capacity=Resources(cpu=cpu, memory_mib=memory, disk_gib=disk, gpus=gpus, extra=extra or {}),
        attributes=attributes or {},
        host_profile_current=profile,
        state=state,
        harvest=harvest,
    )


def job(
    name: str = "web",
    *,
    entitlement: str = "ads",
    count: int = 3,
    memory: int = 1024,
    cpu: int = 500,
    disk: int = 0,
    gpus: int = 0,
    extra: dict[str, int] | None = None,
    placement: Placement | None = None,
    generation: int = 1,
    deleting: bool = False,
) -> Job:
    now = datetime.now(UTC)
    spec = JobSpec(
        name=name,
        entitlement=entitlement,
        count=count,
        task=TaskTemplate(
            package="web",
            version="1.0",
            command="sleep",
            resources=Resources(
                cpu=cpu, memory_mib=memory, disk_gib=disk, gpus=gpus, extra=extra or {}
            ),
        ),
        placement=placement or Placement(),
    )
    return Job(spec=spec, generation=generation, created_at=now, updated_at=now, deleting=deleting)


def entitlement(
    name: str = "ads",
    *,
    memory: int = BIG,
    cpu: int = BIG,
    disk: int = BIG,
    gpus: int = BIG,
    extra: dict[str, int] | None = None,
    machines: dict[str, int] | None = None,
    allowed_dcs: list[str] | None = None,
    host_profile: str | None = None,
) -> Entitlement:
    return Entitlement(
        name=name,
        quota=Quota(
            resources=Resources(
                cpu=cpu, memory_mib=memory, disk_gib=disk, gpus=gpus, extra=extra or {}
            ),
            machines=machines or {},
        ),
        allowed_dcs=allowed_dcs or [],
        host_profile=host_profile,
    )


@dataclass(frozen=True)
class Record:
    """A machine's allocation record and its entries (task id -> resources)."""

    header: Allocation
    entries: dict[str, Resources] = field(default_factory=dict)


def allocation(
    machine_id: str,
    *tasks: tuple[str, int, Resources],
    owner: str | None = None,
    host_profile: str | None = None,
) -> Record:
    """An allocation record holding `tasks` as (job handle, index, resources)."""
    return Record(
        Allocation(machine=machine_id, entitlement=owner, host_profile=host_profile),
        {f"{handle}/{index}": resources for handle, index, resources in tasks},
    )


class Region:
    """An allocation index with the choice cache an allocator replica keeps, fed and committed
    to as the replica does it, without a store: revisions are counted here."""

    def __init__(self, replica: str = "") -> None:
        self.index = AllocationIndex()
        self.cache = ChoiceCache(replica)
        self.index.listeners.append(self.cache)
        # The records a commit writes come from the engine's own code, which reads nothing of
        # the engine but its index: no store, no replica.
        self.revision = 0
        self.store: dict[str, bytes] = {}
        """What the records and entries written would be in the store, by key."""

    def _next_revision(self) -> int:
        self.revision += 1
        return self.revision

    def add(self, *machines: Machine) -> Region:
        for added in machines:
            self.index.set_machine(added.id, to_json(added))
        return self

    def entitle(self, *entitlements: Entitlement) -> Region:
        for added in entitlements:
            self.index.set_entitlement(added.name, to_json(added))
        return self

    def set_ephemeral(self, record: EphemeralResource) -> Region:
        """Feeds `resources/<entitlement>/<label>` in, as the watch would deliver it."""
        name = f"{record.entitlement}/{record.label}"
        self.index.set_ephemeral(name, to_json(record), self._next_revision())
        return self

    def put_record(self, machine_id: str, value: Record | bytes) -> int:
        """Stores `allocations/<machine_id>` (and, for a `Record`, exactly its entries) in one
        transaction, as the watch would deliver it; returns its revision."""
        revision = self._next_revision()
        data = value if isinstance(value, bytes) else to_json(value.header)
        self.put(keys.allocation(machine_id), data, revision)
        if isinstance(value, Record):
            prefix = keys.allocation_entries(machine_id)
            wanted = {prefix + task_id: to_json(held) for task_id, held in value.entries.items()}
            for key in [key for key in self.store if key.startswith(prefix)]:
                if key not in wanted:
                    del self.store[key]
                    self.index.set_allocation(key[len(keys.ALLOCATIONS) :], None, revision)
            for key, entry in wanted.items():
                self.put(key, entry, revision)
        return revision

    def load(self, store: Mapping[str, bytes]) -> Region:
        """Feeds every record and entry of `store` in, as one listing at one revision."""
        revision = self._next_revision()
        for key, value in store.items():
            self.put(key, value, revision)
        return self

    def put(self, key: str, value: bytes, revision: int) -> None:
        """Stores any key under `allocations/` as of `revision`."""
        self.store[key] = value
        kv = KeyValue(key, value, 1, revision, 1)
        self.index.set_allocation(key[len(keys.ALLOCATIONS) :], kv, revision)

    def row(self, machine_id: str) -> int:
        return self.index.row_of[machine_id]

    def ids(self, rows: Iterable[int]) -> list[str]:
        return sorted(self.index.ids[row] for row in rows)

    def planner(self, placed_job: Job, owner: Entitlement) -> Planner:
        return Planner(self.index, self.cache, placed_job, owner)

    def choose(
        self,
        placed_job: Job,
        owner: Entitlement,
        indexes: Sequence[int] | None = None,
        keep: Mapping[int, int] | None = None,
    ) -> Choice:
        """Chooses rows for `indexes` (default: every task not placed yet) as Place does."""
        held = self.index.held(placed_job.handle)
        if indexes is None:
            indexes = [i for i in range(placed_job.spec.count) if i not in held]
        return self.planner(placed_job, owner).choose(indexes, held, keep)

    def commit(self, placed_job: Job, owner: Entitlement, choice: Choice) -> int:
        """Writes the records and entries Place would write for `choice` and applies them to
        the index as a successful commit does."""
        snapshot, entries = place_tentatively(self.index, placed_job, owner, choice)
        rows = snapshot.rows.tolist()
        for row in rows:
            self.store[keys.allocation(self.index.ids[row])] = self.index.header_json(row)
        for added in entries.values():
            self.store.update(added)
        revision = self._next_revision()
        self.index.confirm(rows, revision)
        return revision

    def stored(self, machine_id: str) -> tuple[Allocation | None, dict[str, Resources]]:
        """The machine's allocation record and entries (task id -> resources) as written."""
        record = self.store.get(keys.allocation(machine_id))
        prefix = keys.allocation_entries(machine_id)
        entries = {
            key[len(prefix) :]: from_json(Resources, value, stored=True)
            for key, value in self.store.items()
            if key.startswith(prefix)
        }
        try:
            header = None if record is None else from_json(Allocation, record, stored=True)
        except ValidationError:
            header = None
        return header, entries

    def place(
        self, placed_job: Job, owner: Entitlement, indexes: Sequence[int] | None = None
    ) -> Choice:
        choice = self.choose(placed_job, owner, indexes)
        self.commit(placed_job, owner, choice)
        return choice

    def placements(self, placed_job: Job) -> dict[int, str]:
        return self.index.placements(placed_job.handle)

    def explain(self, placed_job: Job, owner: Entitlement) -> Explanation:
        return explain(self.planner(placed_job, owner))

    def owner_of(self, machine_id: str) -> str | None:
        return self.index.owners.name(int(self.index.owner[self.row(machine_id)]))


async def put_job(store: Store, record: Job) -> None:
    """Writes the job's record as the frontend does."""
    await store.put(keys.job(record.spec.entitlement, record.spec.name), to_json(record))
