"""Headless Chromium for browser tests, driven by Playwright's sync API.

`browser` is one Chromium per test module; `page` is a fresh page in its own
browser context (own cookies and storage) per test. Chromium is the system's
(the `chromium` binary on PATH, as .ci/run installs it), not a Playwright
download. Where Chromium or the playwright package is missing, the tests that
use these fixtures are skipped with the reason; under REQUIRE_SERVICES=1 they
fail instead.

    @pytest.mark.postgres
    @pytest.mark.browser
    def test_login_page(asgi_server, page):
        page.goto(f"{asgi_server}/login/")
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.plugins.services import service_unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "screenshots"  # gitignored
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
DEFAULT_TIMEOUT_MS = 15_000


def chromium_executable() -> str | None:
    """The system Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


# Module scope, not session: while Playwright's sync API is active, an asyncio
# loop counts as running on the main thread, so asyncio.run() (and async code
# under test) in any later, unrelated test would fail. Keep browser tests
# together in their modules; a launch costs well under a second.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless system Chromium for the tests of one module."""
    executable = chromium_executable()
    if executable is None:
        service_unavailable("chromium not found on PATH; install the chromium package")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        service_unavailable("the playwright package is missing; install the dev extras")
    assert executable is not None
    # Playwright's sync API keeps an asyncio loop on this thread, and Django then
    # refuses ORM calls "from an async context". The tests are sequential and the
    # loop only drives the browser, so the guard has nothing to protect here.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=executable, args=CHROMIUM_ARGS, headless=True
            )
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page in a fresh browser context (no cookies), 1280x800."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1280, "height": 800}, locale="en-US")
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    # expect() has its own wait (5 s by default): a turn on a loaded machine, with the
    # suite's other worker beside it, may take longer, and a passing test waits no less.
    expect.set_options(timeout=DEFAULT_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def screenshots_dir() -> Path:
    """The screenshots/ folder at the repository root (gitignored), created if needed."""
    SCREENSHOTS.mkdir(exist_ok=True)
    return SCREENSHOTS
