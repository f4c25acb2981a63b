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
    """The jobs waiting for tasks to be admitted, in the decider's order."""
    return sorted((record for record in admissions if record.waits), key=Admission.queue_key)


def position(admissions: Sequence[Admission], handle: str) -> int | None:
    """1 for the head of the queue; None when the job is not waiting."""
    for place, record in enumerate(waiting(admissions), start=1):
        if record.job == handle:
            return place
    return None


async def check_submission(
    store: Store, region: RegionConfig, spec: JobSpec, *, current: Admission | None = None
) -> None:
    """409 when the job (a new one, or one admitted as `current` says, scaled to `spec`) could
    never be admitted, or says `on_full: reject` and could not be admitted now: a job waiting
    ahead of it does not fit, or its entitlement's tree has no room for the tasks it needs
    beside those it holds, that preempting strictly lower priorities or reclaiming lent quota
    would make. The decider is the judge; this check, from admission records without the tasks
    that have finished, errs on the side of refusing."""
    held = 0 if current is None else current.holds
    more_tasks = max(spec.least_count - held, 0)
    if not more_tasks:
        return
    tree, members = await tree_of(store, spec.entitlement)
    name = spec.entitlement
    subject = f"job '{spec.handle}'" + ("" if current is None else f" at {spec.count} task(s)")
    try:
        whole = tree.vector(spec.task.resources * spec.least_count)
        demand = tree.vector(spec.task.resources * more_tasks)
    except ResourceOverflow as exc:
        raise OverQuota(
            f"{subject} asks for more than any quota can hold: {', '.join(exc.dimensions)}"
        ) from None
    # Whether it could ever fit is a question of all its tasks, those it holds among them.
    if not tree.fits(name, whole):
        most = "; ".join(tree.shortfall(name, whole))
        raise OverQuota(
            f"{subject} could never be admitted: {spec.least_count} task(s) need more than "
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
                tree.use(member, tree.vector(record.task_resources * record.holds))
    # What it holds stays reserved: the tasks it needs come on top of those.
    tree.use(name, tree.vector(spec.task.resources * held))
    # The decider admits in order: the jobs waiting ahead go first, and one that does not fit
    # holds the queue.
    order = (current or Admission.of(spec, datetime.now(UTC))).queue_key()
    for record in waiting(mine):
        if record.queue_key() >= order or record.job == spec.handle:
            break
        ahead = tree.vector(record.task_resources * record.asks)
        if not tree.fits(name, ahead):
            raise OverQuota(
                f"job '{record.job}' waits ahead of '{spec.handle}' in entitlement '{name}', "
                f"and {subject} says on_full: reject; {_advice(current, held)}"
            )
        tree.use(name, ahead)
    if tree.fits(name, demand) or tree.fits_guarantee(name, demand):
        return
    for record in mine:
        lower = record.priority < min(spec.priority, region.non_preemptible_priority)
        if lower and record.state is AdmissionState.ADMITTED:
            tree.release(name, tree.vector(record.task_resources * record.holds))
    if tree.fits(name, demand):
        return
    short = "; ".join(tree.shortfall(name, demand))
    need = f"{more_tasks} task(s)" + (f" beside the {held} it holds" if held else "")
    raise OverQuota(
        f"entitlement '{name}' has no room for {subject} now, and it says on_full: reject "
        f"(need: {need}; free: what its quota, borrowing and preemptible lower priorities "
        f"leave): {short}; {_advice(current, held)}"
    )


def _advice(current: Admission | None, held: int) -> str:
    """What a refused job can do."""
    if current is None:
        return "submit it with on_full: queue to wait its turn"
    return (
        f"it stays at {current.tasks} task(s) ({held} admitted); scale it once there is room, "
        "or submit it with on_full: queue to wait its turn"
    )
