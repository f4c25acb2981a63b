"""The dashboard's pages over HTTP on a real store and frontend: the login cookie, what a member
sees, who may drain, and the requests it refuses. (tests/e2e/test_dashboard.py drives it in a
browser.)"""

from __future__ import annotations

import re

from tests.integration.frontend.conftest import ALICE, MALLORY, Region, job_spec
from tether.frontend.ui.session import COOKIE

HTMX = {"HX-Request": "true"}


def token(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


async def logged_in(region: Region, headers: dict[str, str]) -> dict[str, str]:
    """The Cookie header a browser sends once logged in with `headers`' token."""
    answer = await region.api.post("/ui/login", data={"token": token(headers)})
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/ui/overview"
    kept = answer.headers["set-cookie"]
    assert "HttpOnly" in kept
    assert "SameSite=strict" in kept
    assert "Path=/ui" in kept
    return cookie(token(headers))


def cookie(value: str) -> dict[str, str]:
    return {"Cookie": f"{COOKIE}={value}"}


async def test_pages_send_a_stranger_to_the_login_page(region: Region) -> None:
    for path in ("/ui", "/ui/jobs", "/ui/machines", "/ui/jobs/team-a/web"):
        answer = await region.api.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"] in ("/ui/overview", "/ui/login"), path
    fragment = await region.api.get("/ui/jobs?fragment=true", headers=HTMX)
    assert (fragment.status_code, fragment.headers["HX-Redirect"]) == (401, "/ui/login")
    unknown = await region.api.get("/ui/jobs", headers=cookie("nope"))
    assert unknown.headers["location"] == "/ui/login"


async def test_another_sites_form_and_a_huge_body_are_refused(region: Region) -> None:
    forged = await region.api.post(
        "/ui/login", data={"token": "admin-token"}, headers={"Origin": "http://evil.test"}
    )
    assert forged.status_code == 403
    assert "set-cookie" not in forged.headers
    huge = await region.api.post("/ui/login", data={"token": "x" * 10_000})
    assert huge.status_code == 413


async def test_a_wrong_or_missing_token_is_said_on_the_login_page(region: Region) -> None:
    wrong = await region.api.post("/ui/login", data={"token": "not-a-token"})
    assert wrong.status_code == 401
    assert "This region does not know that token." in wrong.text
    assert "set-cookie" not in wrong.headers
    empty = await region.api.post("/ui/login", data={"token": "  "})
    assert empty.status_code == 400
    assert "Paste a token" in empty.text


async def test_a_member_sees_only_its_entitlements_jobs_and_no_drain(region: Region) -> None:
    for headers, spec in ((ALICE, job_spec("web")), (MALLORY, job_spec("b", entitlement="team-b"))):
        assert (await region.api.post("/v1/jobs", json=spec, headers=headers)).status_code == 201
    cookies = await logged_in(region, ALICE)
    jobs = await region.api.get("/ui/jobs", headers=cookies)
    assert jobs.status_code == 200
    assert re.findall(r'data-job="([^"]+)"', jobs.text) == ["team-a/web"]
    assert "team-b" not in jobs.text
    theirs = await region.api.get("/ui/jobs/team-b/b", headers=cookies)
    assert theirs.status_code == 403
    ours = await region.api.get("/ui/jobs/team-a/web", headers=cookies)
    assert ours.status_code == 200
    assert "generation</dt><dd>1" in ours.text  # no scheduler runs here: no tasks yet
    assert "No tasks yet." in ours.text
    machines = await region.api.get("/ui/machines", headers=cookies)
    assert machines.status_code == 200
    assert "Drain" not in machines.text
    refused = await region.api.post("/ui/machines/m1/drain", headers=cookies | HTMX)
    assert refused.status_code == 403


async def test_filters_select_jobs(region: Region) -> None:
    for name in ("web", "api", "batch-1"):
        spec = job_spec(name, count=1, cpu=100)
        assert (await region.api.post("/v1/jobs", json=spec, headers=ALICE)).status_code == 201
    cookies = await logged_in(region, ALICE)

    async def shown(**query: str) -> list[str]:
        answer = await region.api.get(
            "/ui/jobs", params={"fragment": "true", **query}, headers=cookies
        )
        assert answer.status_code == 200
        assert "<html" not in answer.text  # the table alone
        return re.findall(r'data-job="([^"]+)"', answer.text)

    assert await shown() == ["team-a/api", "team-a/batch-1", "team-a/web"]
    assert await shown(text="WE") == ["team-a/web"]
    assert await shown(entitlement="team-b") == []
    assert await shown(kind="batch") == []
    assert len(await shown(sort="created")) == 3


async def test_a_drain_needs_the_header_htmx_sends(region: Region) -> None:
    forged = await region.api.post("/ui/machines/m1/drain", headers=cookie("admin-token"))
    assert forged.status_code == 400
    assert "HX-Request" in forged.json()["detail"]
