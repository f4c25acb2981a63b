"""PUT and GET /v1/accelerator-reports, and the dashboard's Accelerators page that shows them,
on a real store and frontend."""

from __future__ import annotations

from typing import Any

from tests.integration.frontend.conftest import ADMIN, ALICE, MALLORY, Region
from tether.frontend.ui.session import COOKIE


def round_report(**changes: Any) -> dict[str, Any]:
    return {
        "policy": "max_min_fairness_perf",
        "round_s": 360,
        "rounds": 3,
        "accelerators": {"v100": 2, "k80": 1},
        "jobs": [
            {
                "job": "team-a/resnet",
                "running_on": "v100",
                "allocation": {"v100": 0.75, "k80": 0.25},
                "received": {"v100": 0.6667, "k80": 0.3333},
            },
            {"job": "team-a/lstm", "running_on": "", "allocation": {"k80": 0.5}},
        ],
    } | changes


async def test_a_member_reports_a_round_and_members_read_it(region: Region) -> None:
    put = await region.api.put("/v1/accelerator-reports/team-a", json=round_report(), headers=ALICE)
    assert put.status_code == 200, put.text
    kept = put.json()
    assert (kept["entitlement"], kept["rounds"], kept["policy"]) == (
        "team-a",
        3,
        "max_min_fairness_perf",
    )
    assert "updated_at" in kept
    for headers, seen in ((ALICE, ["team-a"]), (ADMIN, ["team-a"]), (MALLORY, [])):
        listed = await region.api.get("/v1/accelerator-reports", headers=headers)
        assert listed.status_code == 200
        assert [r["entitlement"] for r in listed.json()["accelerator_reports"]] == seen
    # A second round replaces the first.
    again = await region.api.put(
        "/v1/accelerator-reports/team-a", json=round_report(rounds=4), headers=ALICE
    )
    assert again.json()["rounds"] == 4


async def test_reports_that_are_not_a_members_or_not_shares_are_refused(region: Region) -> None:
    foreign = await region.api.put(
        "/v1/accelerator-reports/team-a", json=round_report(), headers=MALLORY
    )
    assert foreign.status_code == 403
    over = round_report(jobs=[{"job": "team-a/x", "allocation": {"v100": 1.5}}])
    refused = await region.api.put("/v1/accelerator-reports/team-a", json=over, headers=ALICE)
    assert refused.status_code == 422
    assert "jobs.0.allocation.v100" in refused.text
    unknown = await region.api.put(
        "/v1/accelerator-reports/nobody", json=round_report(), headers=ADMIN
    )
    assert unknown.status_code == 404
    listed = await region.api.get("/v1/accelerator-reports", headers=ADMIN)
    assert listed.json()["accelerator_reports"] == []


async def test_the_accelerators_page_shows_each_type_s_jobs_and_shares(region: Region) -> None:
    put = await region.api.put("/v1/accelerator-reports/team-a", json=round_report(), headers=ALICE)
    assert put.status_code == 200
    cookie = {"Cookie": f"{COOKIE}=alice-token"}
    shown = await region.api.get("/ui/accelerators", headers=cookie)
    assert shown.status_code == 200
    text = shown.text
    assert 'data-report="team-a"' in text
    assert "<strong>v100</strong> \N{MULTIPLICATION SIGN} 2" in text
    assert "<strong>k80</strong> \N{MULTIPLICATION SIGN} 1" in text
    assert "75.0%" in text  # resnet's allocation on the V100
    assert "66.7%" in text  # and what it received there
    theirs = await region.api.get("/ui/accelerators", headers={"Cookie": f"{COOKIE}=mallory-token"})
    assert 'data-report="team-a"' not in theirs.text
