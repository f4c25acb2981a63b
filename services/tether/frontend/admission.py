"""What the frontend knows of admission: the checks at submission (a job that could never be
admitted, a job that refuses to wait), and a queue's order and positions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from tether.frontend import records
from tether.frontend.problems import NotFound, OverQuota, validation_problem
from tether.model import Entitlement, Job, JobSpec, OnFull, RegionConfig, ResourceOverflow
from tether.model.admission import Admission, AdmissionState
from tether.model.quota_tree import QuotaTree, TreeError, tree_problems
from tether.store import Store, keys


async def tree_of(store: Store, entitlement: str) -> tuple[QuotaTree, list[str]]:
    """The quota tree with every entitlement, and the names in `entitlement`'s tree."""
    every = await records.scan(store, keys.ENTITLEMENTS, Entitlement)
    try:
        tree = QuotaTree(every)
    except TreeError:
        # Records written before cycles were refused: judge the entitlement alone.
        tree = QuotaTree([e for e in every if e.name == entitlement])
    if entitlement not in tree.nodes:
        # Deleted since the request found it.
        raise NotFound(f"entitlement '{entitlement}' does not exist")
    root = tree.root_of(entitlement)
    return tree, [node.name for node in tree.subtree(root)]


async def admissions_of(store: Store, entitlement: str) -> list[Admission]:
    """The admission records of the entitlement's jobs."""
    return await records.scan(store, keys.admissions_of(entitlement), Admission)


def check_tree(existing: Iterable[Entitlement], candidate: Entitlement) -> None:
    """422 naming each field of `candidate` that does not fit the tree (`tree_problems`)."""
    problems = tree_problems(existing, candidate)
    if problems:
        raise validation_problem(
            [{"loc": tuple(field.split(".")), "msg": message} for field, message in problems]
        )


def waiting(admissions: Iterable[Admission]) -> list[Admission]:
    """The jobs waiting to start, in queue order."""
    return sorted(
        (record for record in admissions if record.state is AdmissionState.QUEUED),
        key=Admission.order,
    )


def position(admissions: Sequence[Admission], handle: str) -> int | None:
    """1 for the head of the queue; None when the job is not waiting."""
    for place, record in enumerate(waiting(admissions), start=1):
        if record.job == handle:
            return place
    return None


async def check_submission(
    store: Store, region: RegionConfig, spec: JobSpec, *, admitted: int = 0
) -> None:
    """409 when the job (a new one, or one with `admitted` tasks admitted now, scaled to
    `spec`) could never be admitted, or says `on_full: reject` and could not be admitted now:
    a job waiting ahead of it does not fit, or its entitlement's tree has no room that
    preempting strictly lower priorities or reclaiming lent quota would make. The decider is
    the judge; this check, from admission records without the tasks that have finished, errs
    on the side of refusing."""
    more_tasks = max(spec.least_count - admitted, 0)
    if not more_tasks:
        return
    tree, members = await tree_of(store, spec.entitlement)
    name = spec.entitlement
    try:
        demand = tree.vector(spec.task.resources * more_tasks)
    except ResourceOverflow as exc:
        raise OverQuota(
            f"job '{spec.handle}' asks for more than any quota can hold: "
            f"{', '.join(exc.dimensions)}"
        ) from None
    if not tree.fits(name, demand):
        most = "; ".join(tree.shortfall(name, demand))
        raise OverQuota(
            f"job '{spec.handle}' could never be admitted: {more_tasks} task(s) need more than "
            f"entitlement '{name}' can ever hold, its quota and borrowing limit within its "
            f"tree's quotas: {most}"
        )
    if spec.full_action is not OnFull.REJECT:
        return
    deleting = {
        job.handle for job in await records.scan(store, keys.jobs_of(name), Job) if job.deleting
    }
    mine: list[Admission] = []
    for member in members:
        found = await admissions_of(store, member)
        if member == name:
            mine = [record for record in found if record.job not in deleting]
        for record in found:
            if record.state is not AdmissionState.QUEUED and record.job != spec.handle:
                tree.use(member, tree.vector(record.task_resources * record.admitted))
    # The decider admits in order: the jobs waiting ahead go first, and one that does not fit
    # holds the queue.
    order = Admission.of(spec, datetime.now(UTC)).order()
    for record in waiting(mine):
        if record.order() >= order or record.job == spec.handle:
            break
        ahead = tree.vector(record.task_resources * record.least_tasks)
        if not tree.fits(name, ahead):
            raise OverQuota(
                f"job '{record.job}' waits ahead of '{spec.handle}' in entitlement '{name}', "
                "and it says on_full: reject; submit it with on_full: queue to wait its turn"
            )
        tree.use(name, ahead)
    if tree.fits(name, demand) or tree.fits_guarantee(name, demand):
        return
    for record in mine:
        lower = record.priority < min(spec.priority, region.non_preemptible_priority)
        if lower and record.state is AdmissionState.ADMITTED:
            tree.release(name, tree.vector(record.task_resources * record.admitted))
    if tree.fits(name, demand):
        return
    short = "; ".join(tree.shortfall(name, demand))
    raise OverQuota(
        f"entitlement '{name}' has no room for job '{spec.handle}' now, and it says "
        f"on_full: reject (need: {more_tasks} task(s); free: what its quota, borrowing and "
        f"preemptible lower priorities leave): {short}; submit it with on_full: queue to wait"
    )
