"""The dashboard in a real browser (headless Chromium through Playwright) on a real region: log
in with the token, see a job submitted through the API appear and reach RUNNING without
reloading, drain a machine with its button and see its state change."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import chromium
from tests.support.harness import LocalRegion, machines_by_id, submit, wait_for

pytestmark = pytest.mark.timeout(300)

LIVE_MS = 30_000
"""How long a page may take to show a change the region made (events, then a refresh)."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture(scope="module")
def client(region: LocalRegion) -> Iterator[httpx.Client]:
    with region.client() as opened:
        yield opened


def log_in(page: Page, region: LocalRegion) -> None:
    page.goto(f"{region.url}/ui")
    expect(page).to_have_url(f"{region.url}/ui/login")
    page.fill("#token", "not a token")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_have_text("This region does not know that token.")
    page.fill("#token", region.token)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{region.url}/ui/overview")


def mark(page: Page) -> None:
    """A mark in the page's JavaScript that a reload would wipe."""
    page.evaluate("window.tetherTestMark = true")


def still_marked(page: Page) -> bool:
    marked: Any = page.evaluate("window.tetherTestMark === true")
    return marked is True


def suspended_job(name: str) -> dict[str, Any]:
    """A batch job held back until it is resumed: its page is open before its tasks start."""
    return {
        "name": name,
        "entitlement": "default",
        "count": 2,
        "kind": "batch",
        "suspended": True,
        "task": {
            "package": "sleeper",
            "version": "1",
            "command": "/bin/sh",
            "args": ["-c", "exec sleep 3600"],
            "resources": {"cpu": 100, "memory_mib": 64},
        },
    }


def test_a_job_submitted_through_the_api_runs_on_the_page_without_a_reload(
    region: LocalRegion, client: httpx.Client, page: Page
) -> None:
    log_in(page, region)
    page.get_by_role("link", name="Jobs").click()
    mark(page)
    handle = submit(client, suspended_job("watched"))
    row = page.locator(f'tr[data-job="{handle}"]')
    expect(row).to_be_visible(timeout=LIVE_MS)
    row.get_by_role("link", name=handle).click()
    expect(page).to_have_url(f"{region.url}/ui/jobs/{handle}")
    expect(page.locator("#job-state")).not_to_have_text("running")
    mark(page)
    resumed = client.patch(f"/v1/jobs/{handle}", json={"suspended": False})
    assert resumed.status_code == 200, resumed.text
    expect(page.locator("#job-state")).to_have_text("running", timeout=LIVE_MS)
    states = page.locator("#tasks tbody tr td:nth-child(2)")
    expect(states).to_have_text(["running", "running"], timeout=LIVE_MS)
    assert still_marked(page), "the page was reloaded"
    assert client.delete(f"/v1/jobs/{handle}").status_code == 202


def test_an_admin_drains_a_machine_with_its_button(
    region: LocalRegion, client: httpx.Client, page: Page
) -> None:
    log_in(page, region)
    page.goto(f"{region.url}/ui/machines")
    machine = sorted(m for m, view in machines_by_id(client).items() if view["state"] == "up")[-1]
    row = page.locator(f'tr[data-machine="{machine}"]')
    expect(row.locator(".state")).to_have_text("up")
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Drain").click()
    expect(row.locator(".state")).to_have_text("draining", timeout=LIVE_MS)
    assert machines_by_id(client)[machine]["state"] == "draining"
    row.get_by_role("button", name="Undrain").click()
    expect(row.locator(".state")).to_have_text("up", timeout=LIVE_MS)
    wait_for(
        lambda: machines_by_id(client)[machine]["state"] == "up" or None,
        timeout_s=30,
        what=f"{machine} up again",
    )
