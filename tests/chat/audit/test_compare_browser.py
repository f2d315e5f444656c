"""The audit's comparison of a replay and its original in a real browser, at 1280 and 375 px.

Screenshots go to screenshots/ (gitignored): audit-compare-1280.png, audit-compare-375.png,
audit-replays-1280.png, audit-replays-375.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.chat.audit.scripted import two_pass_run
from tests.chat.audit.test_compare import replayed
from tests.chat.audit.test_pages_browser import fits
from tests.factories import UserFactory
from tests.test_pages_browser import PASSWORD, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

expect = pytest.importorskip("playwright.sync_api", reason="playwright is not installed").expect

pytestmark = [pytest.mark.postgres, pytest.mark.browser]


def test_the_comparison_page_at_1280_and_375_px(
    asgi_server: str, page: Page, llm_server, screenshots_dir: Path
):
    owner = UserFactory(username="ada")
    original = two_pass_run(llm_server, owner)
    replica = replayed(llm_server, original)
    UserFactory(username="auditor", is_staff=True, is_superuser=True)
    log_in(page, asgi_server, "auditor", PASSWORD)
    for width in (1280, 375):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{asgi_server}/audit/runs/{original.pk}/compare/{replica.pk}/")
        expect(page.get_by_test_id("waterfall")).to_have_count(2)
        expect(page.get_by_test_id("compare-run")).to_have_count(2)
        diff = page.get_by_test_id("answer-diff")
        # Words are compared: the changed words go out and in together.
        expect(diff.locator("del")).to_have_count(1)
        expect(diff.locator("ins")).to_have_count(1)
        expect(diff.locator("del")).to_have_text("Twelve times seven is")
        expect(diff.locator("ins")).to_have_text("Seven twelves make")
        boxes = [page.get_by_test_id("waterfall").nth(i).bounding_box() for i in range(2)]
        assert boxes[0] is not None
        assert boxes[1] is not None
        assert boxes[0]["y"] + boxes[0]["height"] <= boxes[1]["y"]  # one above the other
        assert max(box["width"] for box in boxes) <= width
        page.screenshot(path=screenshots_dir / f"audit-compare-{width}.png", full_page=True)
        fits(page, width)


def test_the_replays_page_at_1280_and_375_px(
    asgi_server: str, page: Page, llm_server, screenshots_dir: Path
):
    owner = UserFactory(username="ada")
    original = two_pass_run(llm_server, owner)
    replayed(llm_server, original)
    UserFactory(username="auditor", is_staff=True, is_superuser=True)
    log_in(page, asgi_server, "auditor", PASSWORD)
    for width in (1280, 375):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{asgi_server}/audit/replays/?period=hour")
        expect(page.get_by_test_id("replay-totals")).to_contain_text("openai/test-model")
        expect(page.get_by_test_id("replay-rows").locator("tbody tr")).to_have_count(1)
        expect(page.get_by_test_id("replay-start")).to_be_visible()
        page.screenshot(path=screenshots_dir / f"audit-replays-{width}.png", full_page=True)
        fits(page, width)
