"""The audit's comparison of two runs: a replay and its original, made by the engine.

The original is a two-pass turn against the scripted server; the replay is
made by `run_replay` on the same server, whose model answers differently.
The page is read as HTML, and in a real browser at 1280 px and at 375 px
(screenshots/audit-compare-1280.png, audit-compare-375.png).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.test import Client

from chat.models import RunStatus
from chat.services.replays import run_replay
from tests.chat.audit.scripted import PACE, two_pass_run
from tests.factories import UserFactory
from tests.llm_server import text_reply, tool_calls_reply
from tests.stack import wait_for_run

if TYPE_CHECKING:
    from playwright.sync_api import Page


def replayed(llm_server, original):
    llm_server.push(
        tool_calls_reply([("calculator", '{"expression": "7*12"}')], **PACE),
        text_reply("Seven twelves make 84.", **PACE),
    )
    replica = wait_for_run(run_replay(run=original, model="openai/test-model"))
    assert replica.status == RunStatus.COMPLETED, replica.error
    return replica


@pytest.mark.django_db(transaction=True)
def test_the_comparison_page_shows_both_runs_their_answers_calls_and_waterfalls(llm_server):
    owner = UserFactory(username="ada")
    original = two_pass_run(llm_server, owner)
    replica = replayed(llm_server, original)
    staff = Client()
    staff.force_login(UserFactory(username="auditor", is_staff=True))

    response = staff.get(f"/audit/runs/{original.pk}/compare/{replica.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('data-testid="compare-run"') == 2
    assert html.count('data-testid="waterfall"') == 2
    assert "<del>Twelve</del><ins>Seven</ins><span> </span><del>times</del>" in html
    assert "<span> 84.</span>" in html
    assert "unmatched" in html  # the replay's calculator call, with other arguments
    assert "{&quot;expression&quot;: &quot;7*12&quot;}" in html
    # Both waterfalls on one axis: the longer run's ticks are the shorter one's too.
    first, second = (html.index(f"wf-title-{run.pk.hex[:8]}") for run in (original, replica))
    assert first < second
    # The original's page lists its replay, the replay's page its original, each to compare.
    compare = f"/audit/runs/{original.pk}/compare/{replica.pk}/"
    assert compare in staff.get(f"/audit/runs/{original.pk}/").content.decode()
    assert compare in staff.get(f"/audit/runs/{replica.pk}/").content.decode()
    # Staff only, and a missing run is a 404.
    user = Client()
    user.force_login(owner)
    assert user.get(compare).status_code == 403
    assert staff.get(f"/audit/runs/{original.pk}/compare/{owner.pk:032x}/").status_code == 404


@pytest.mark.postgres
@pytest.mark.browser
def test_the_comparison_page_at_1280_and_375_px(
    asgi_server: str, page: Page, llm_server, screenshots_dir: Path
):
    from playwright.sync_api import expect

    from tests.chat.audit.test_pages_browser import fits
    from tests.test_pages_browser import PASSWORD, log_in

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
        expect(diff.locator("del")).to_have_count(3)
        expect(diff.locator("ins")).to_have_count(3)
        expect(diff.locator("ins").first).to_have_text("Seven")
        boxes = [page.get_by_test_id("waterfall").nth(i).bounding_box() for i in range(2)]
        assert boxes[0] is not None
        assert boxes[1] is not None
        assert boxes[0]["y"] + boxes[0]["height"] <= boxes[1]["y"]  # one above the other
        assert max(box["width"] for box in boxes) <= width
        page.screenshot(path=screenshots_dir / f"audit-compare-{width}.png", full_page=True)
        fits(page, width)
