"""Adding a placement rule is one module and one registry line: a filter and a scorer that
exist only in this test act in placement, in Explain and in the cache keys once registered."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.allocator_builders import Region, entitlement, job, machine
from tether.allocator.rules import registry
from tether.allocator.rules.base import Fact, Filter, Plan, Reads, Scorer
from tether.allocator.rules.checks import I64, Check, Rows
from tether.allocator.rules.pipeline import Pipeline
from tether.model import Job, JobSpec


class FencedMachinesOnly(Filter):
    """At-most-once jobs only on machines labelled fencing=yes (a rule of this test only)."""

    reads = Reads(job=("at_most_once",), machine=frozenset({Fact.ATTRIBUTES}))

    def checks(self, plan: Plan) -> list[Check]:
        if not plan.job.spec.at_most_once:
            return []
        column = plan.index.attribute_column("fencing")
        yes = plan.index.attribute_values["fencing"].code("yes")
        return [Check("fencing", "no fencing", lambda rows: column[rows] == yes)]


class NewestGeneration(Scorer):
    """Machines labelled gen=new first, above every other scorer (a rule of this test only)."""

    reads = Reads(machine=frozenset({Fact.ATTRIBUTES}))

    def parts(self, plan: Plan) -> list[tuple[str, int]]:
        return [("gen new", 1)]

    def score(self, plan: Plan, rows: Rows) -> I64:
        column = plan.index.attribute_column("gen")
        new = plan.index.attribute_values["gen"].code("new")
        scores: I64 = (column[rows] == new).astype(np.int64)
        return scores


def fenced(name: str, *, at_most_once: bool = True) -> Job:
    base = job(name, count=1)
    spec = JobSpec.model_validate({**base.spec.model_dump(), "at_most_once": at_most_once})
    return base.model_copy(update={"spec": spec})


def region() -> Region:
    # "plain" fits best (least free memory): only the rules under test move a task elsewhere.
    return Region().add(
        machine("plain", memory=2048),
        machine("fenced", memory=8192, attributes={"fencing": "yes"}),
        machine("newest", memory=8192, attributes={"gen": "new"}),
    )


@pytest.fixture
def fencing_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "FILTERS", (*registry.FILTERS, FencedMachinesOnly()))


@pytest.fixture
def generation_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "SCORERS", (NewestGeneration(), *registry.SCORERS))


def test_without_the_rules_the_best_fit_wins() -> None:
    ads = entitlement()
    placed = region().entitle(ads)
    choice = placed.choose(fenced("j"), ads)
    assert placed.ids(choice.placements.values()) == ["plain"]


@pytest.mark.usefixtures("fencing_registered")
def test_a_registered_filter_acts_in_placement_and_explain() -> None:
    ads = entitlement()
    placed = region().entitle(ads)
    choice = placed.choose(fenced("j"), ads)
    assert placed.ids(choice.placements.values()) == ["fenced"]
    # A job the rule does not apply to is placed as before.
    free = placed.choose(fenced("k", at_most_once=False), ads)
    assert placed.ids(free.placements.values()) == ["plain"]
    outcome = next(o for o in placed.explain(fenced("j"), ads).outcomes if o.rule == "fencing")
    assert (outcome.reason, outcome.rejected) == ("no fencing", 2)


@pytest.mark.usefixtures("fencing_registered")
def test_a_registered_filter_says_why_nothing_fits() -> None:
    ads = entitlement()
    placed = Region().add(machine("plain")).entitle(ads)
    choice = placed.choose(fenced("j"), ads)
    assert choice.unplaced == {0: "no machine fits: 1 of 1 machines: no fencing"}


def test_a_registered_filter_is_in_the_cache_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    ads = entitlement()
    placed = region().entitle(ads)

    def keys(spec_job: Job) -> tuple[object, ...]:
        pipeline = placed.planner(spec_job, ads).rules
        return pipeline.owned_key(), pipeline.pool_key()

    # Unregistered, the field it reads is in no key: jobs differing only there share entries.
    assert keys(fenced("j")) == keys(fenced("j", at_most_once=False))
    monkeypatch.setattr(registry, "FILTERS", (*registry.FILTERS, FencedMachinesOnly()))
    owned, pool = keys(fenced("j"))
    other_owned, other_pool = keys(fenced("j", at_most_once=False))
    assert owned != other_owned
    assert pool != other_pool
    # And the cache serves each its own list: "plain" joins the entitlement for a job the
    # rule does not apply to; a job it applies to must not stack on it from a shared list.
    first = placed.place(fenced("a", at_most_once=False), ads)
    second = placed.choose(fenced("b"), ads)
    assert placed.ids(first.placements.values()) == ["plain"]
    assert placed.ids(second.placements.values()) == ["fenced"]


@pytest.mark.usefixtures("generation_registered")
def test_a_registered_scorer_ranks_first_and_is_explained() -> None:
    ads = entitlement()
    placed = region().entitle(ads)
    pipeline: Pipeline = placed.planner(fenced("j"), ads).rules
    assert ("gen new", 1) in [(label, weight) for label, weight, _ in pipeline.explained_parts()]
    choice = placed.place(fenced("j"), ads)
    assert placed.ids(choice.placements.values()) == ["newest"]
    explanation = placed.explain(fenced("j"), ads)
    assert [(p.rule, p.matching) for p in explanation.preferences] == [("gen new", 1)]
    assert explanation.chosen[0].preferences == ["gen new"]
    assert explanation.chosen[0].rank == 1
