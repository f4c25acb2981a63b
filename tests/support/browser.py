"""A real browser for the dashboard's tests: headless Chromium (Debian's `chromium`, which
scripts/test installs) driven by Playwright."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM_ENV = "TETHER_CHROMIUM"


def chromium_path() -> str:
    """TETHER_CHROMIUM, else the chromium on PATH; a test that needs one and finds none fails."""
    found = (
        os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not found:
        pytest.fail(
            f"no Chromium: scripts/test installs Debian's chromium package; or set {CHROMIUM_ENV}"
        )
    return found


@contextmanager
def chromium() -> Iterator[Browser]:
    # Chromium's singleton socket lives in TMPDIR, and a Unix socket's path has at most 107
    # bytes: a test's own deep TMPDIR is too long for it.
    with (
        tempfile.TemporaryDirectory(prefix="tether-chromium-", dir="/tmp") as short,
        sync_playwright() as playwright,
    ):
        # As root (CI), Chromium runs only without its sandbox.
        browser = playwright.chromium.launch(
            executable_path=chromium_path(),
            args=["--no-sandbox"],
            env={**os.environ, "TMPDIR": short},
        )
        try:
            yield browser
        finally:
            browser.close()
